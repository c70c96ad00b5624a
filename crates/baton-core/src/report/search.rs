//! Byte searches for the scanner's hot path, which runs over every byte a job prints (possibly
//! gigabytes). They test eight bytes at a time in a `u64` ("SWAR"), which is several times faster
//! than a byte loop and needs no dependency or `unsafe`.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A word with the high bit set in each byte of `word` that is zero. A byte above a true zero
/// byte may also be flagged (borrow), never one below, so the lowest flag is exact.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

#[inline]
fn splat(byte: u8) -> u64 {
    ONES * u64::from(byte)
}

/// The first position of `a` or `b` in `hay`.
pub(crate) fn find_either(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    let (wanted_a, wanted_b) = (splat(a), splat(b));
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks_exact(8) yields 8 bytes"));
        let hits = zero_bytes(word ^ wanted_a) | zero_bytes(word ^ wanted_b);
        if hits != 0 {
            return Some(offset + (hits.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == a || c == b)
        .map(|p| offset + p)
}

/// Calls `f` with the position of each space in `hay` that is followed by a digit or `[`, in
/// order (where counters like `Epoch 3/10` or `Step [100/500]` may be).
pub(crate) fn for_each_space_before_number(hay: &[u8], mut f: impl FnMut(usize)) {
    let load =
        |at: usize| u64::from_le_bytes(hay[at..at + 8].try_into().expect("slice of 8 bytes"));
    let mut offset = 0;
    // Each word is tested against the word one byte further on, which must exist.
    while offset + 9 <= hay.len() {
        let (word, next) = (load(offset), load(offset + 1));
        let number_next = bytes_between(next, b'0' - 1, b'9' + 1) | bytes_equal(next, b'[');
        let mut hits = bytes_equal(word, b' ') & number_next;
        while hits != 0 {
            f(offset + (hits.trailing_zeros() / 8) as usize);
            hits &= hits - 1;
        }
        offset += 8;
    }
    for at in offset..hay.len() {
        let next = hay.get(at + 1).copied().unwrap_or(0);
        if hay[at] == b' ' && (next.is_ascii_digit() || next == b'[') {
            f(at);
        }
    }
}

/// The high bit set in each byte of `word` equal to `byte`. Exact per byte, unlike
/// [`zero_bytes`], because it never subtracts across bytes.
#[inline]
fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ splat(byte);
    let low7 = ONES * 127;
    !(((x & low7) + low7) | x | low7)
}

/// Calls `f` with the position of each ASCII capital letter in `hay`, in order.
pub(crate) fn for_each_uppercase(hay: &[u8], mut f: impl FnMut(usize)) {
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks_exact(8) yields 8 bytes"));
        let mut hits = bytes_between(word, b'A' - 1, b'Z' + 1);
        while hits != 0 {
            f(offset + (hits.trailing_zeros() / 8) as usize);
            hits &= hits - 1;
        }
        offset += 8;
    }
    for (i, b) in chunks.remainder().iter().enumerate() {
        if b.is_ascii_uppercase() {
            f(offset + i);
        }
    }
}

/// The high bit set in each byte of `word` that lies strictly between `low` and `high` (both
/// below 128; bytes of 128 and above never match). Exact per byte: the 7-bit arithmetic cannot
/// carry from one byte into the next.
#[inline]
fn bytes_between(word: u64, low: u8, high: u8) -> u64 {
    let low7 = word & (ONES * 127);
    (ONES * (127 + u64::from(high)) - low7) & !word & (low7 + ONES * (127 - u64::from(low))) & HIGHS
}

/// Whether `hay` contains `needle_lower` (ASCII lower case) ignoring ASCII case.
pub(crate) fn contains_ignore_case(hay: &[u8], needle_lower: &[u8]) -> bool {
    find_ignore_case(hay, needle_lower).is_some()
}

/// Where `hay` first holds `needle_lower` (ASCII lower case), ignoring ASCII case.
pub(crate) fn find_ignore_case(hay: &[u8], needle_lower: &[u8]) -> Option<usize> {
    let Some(&first) = needle_lower.first() else {
        return Some(0);
    };
    let mut from = 0;
    while let Some(p) = find_either(&hay[from..], first, first.to_ascii_uppercase()) {
        let at = from + p;
        if starts_with_ignore_case(&hay[at..], needle_lower) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Whether `hay` starts with `prefix_lower` (ASCII lower case) ignoring ASCII case.
pub(crate) fn starts_with_ignore_case(hay: &[u8], prefix_lower: &[u8]) -> bool {
    hay.len() >= prefix_lower.len() && hay[..prefix_lower.len()].eq_ignore_ascii_case(prefix_lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_bytes_at_every_offset_and_across_word_edges() {
        for len in 0..40 {
            for at in 0..len {
                let mut hay = vec![b'x'; len];
                hay[at] = b'\n';
                // A byte just above the match (0x0b) must not confuse the borrow trick.
                if at + 1 < len {
                    hay[at + 1] = 0x0b;
                }
                assert_eq!(find_either(&hay, b'\r', b'\n'), Some(at));
            }
            assert_eq!(find_either(&vec![b'x'; len], b'\n', b'\r'), None);
        }
        assert_eq!(find_either(b"abc\rdef\n", b'\n', b'\r'), Some(3));
        assert_eq!(find_either(&[0x01, 0x00, 0x0a], 0x0a, 0x0d), Some(2));
    }

    #[test]
    fn finds_capitals_exactly() {
        let text = "aZ\u{e9}Q@[`{A bcD\u{100}EFGHIJKLMNOPQRSTUVWXYZ0";
        let mut found = Vec::new();
        for_each_uppercase(text.as_bytes(), |i| found.push(i));
        let expected: Vec<usize> = text
            .bytes()
            .enumerate()
            .filter(|(_, b)| b.is_ascii_uppercase())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found, expected);
        for b in 0..=255u8 {
            let mut hits = Vec::new();
            for_each_uppercase(&[b; 9], |i| hits.push(i));
            let n = if b.is_ascii_uppercase() { 9 } else { 0 };
            assert_eq!(hits.len(), n, "byte {b}");
        }
    }

    #[test]
    fn finds_spaces_before_numbers_exactly() {
        for text in [
            "Epoch 3/10 step [5] x 7",
            " 1 2 3 4 5 6 7 8 9 10 11 12 ",
            "no numbers here at all, none",
            "        9",
            " ",
            "",
        ] {
            let mut found = Vec::new();
            for_each_space_before_number(text.as_bytes(), |i| found.push(i));
            let b = text.as_bytes();
            let expected: Vec<usize> = (0..b.len())
                .filter(|&i| {
                    b[i] == b' '
                        && b.get(i + 1)
                            .is_some_and(|n| n.is_ascii_digit() || *n == b'[')
                })
                .collect();
            assert_eq!(found, expected, "{text:?}");
        }
        // Every byte value after a space, at every position of a word.
        for next in 0..=255u8 {
            for at in 0..12 {
                let mut hay = vec![b'x'; 12];
                hay[at] = b' ';
                if at + 1 < 12 {
                    hay[at + 1] = next;
                }
                let mut found = Vec::new();
                for_each_space_before_number(&hay, |i| found.push(i));
                let expect = at + 1 < 12 && (next.is_ascii_digit() || next == b'[');
                assert_eq!(
                    found,
                    if expect { vec![at] } else { vec![] },
                    "{next} at {at}"
                );
            }
        }
    }

    #[test]
    fn finds_words_ignoring_case() {
        assert!(contains_ignore_case(b"Train LOSS is NaN", b"loss"));
        assert!(!contains_ignore_case(b"Train los", b"loss"));
    }
}
