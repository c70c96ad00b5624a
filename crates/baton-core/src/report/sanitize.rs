//! Making job output safe to show: [`sanitize_line`] removes everything a terminal, a markdown
//! renderer or a reader could be tricked by (escape sequences, control characters, bidi
//! overrides, invisible characters), and the helpers below cut and quote the result.

/// Strips terminal control sequences from one line of job output and returns plain text:
/// - CSI (`ESC [` ... final byte, or the 8-bit `0x9B`), OSC (`ESC ]` ... BEL or `ESC \`, or
///   8-bit `0x9D`), DCS/SOS/PM/APC strings and the other `ESC` sequences are removed whole, so an
///   OSC 8 hyperlink keeps its visible text and an OSC 52 clipboard write disappears;
/// - tabs are expanded to spaces (stops every 8 columns); every other C0 control, DEL and
///   every C1 control (U+0080–U+009F) are removed;
/// - a carriage return redraws the line (progress bars), so only the text after the last `\r`
///   is kept (a trailing `\r\n` is just a line end);
/// - invalid UTF-8 becomes U+FFFD (a lone byte 0x80–0x9F counts as the C1 control it encodes);
/// - bidi overrides and isolates, zero-width and other invisible characters used to hide text
///   are removed.
pub fn sanitize_line(raw: &[u8]) -> String {
    let mut out = String::new();
    sanitize_into(raw, &mut out);
    out
}

/// [`sanitize_line`] for text whose line breaks carry its meaning (a shell script passed as one
/// argument: `sh -c $'set -e\npython a.py'`): each line is sanitized on its own (a `\r\n` is
/// a plain line end) and the lines are joined by `\n`, the one control character kept.
pub(crate) fn sanitize_lines(text: &str) -> String {
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| sanitize_line(line.as_bytes()))
        .collect();
    lines.join("\n")
}

/// [`sanitize_line`] into a reused buffer (the scanner calls it per line and must not allocate).
pub(crate) fn sanitize_into(raw: &[u8], out: &mut String) {
    out.clear();
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let mut end = raw.len();
    while end > 0 && raw[end - 1] == b'\r' {
        end -= 1;
    }
    let raw = &raw[..end];
    let visible = match raw.iter().rposition(|&b| b == b'\r') {
        Some(cr) => &raw[cr + 1..],
        None => raw,
    };

    let mut cleaner = Cleaner {
        out,
        state: Escape::None,
        column: 0,
    };
    for chunk in visible.utf8_chunks() {
        for c in chunk.valid().chars() {
            cleaner.step(c);
        }
        let invalid = chunk.invalid();
        if !invalid.is_empty() {
            // A lone 0x80–0x9F byte is how 8-bit terminals receive C1 controls (0x9B is CSI),
            // so it is treated as that control rather than as one more U+FFFD.
            let c = match invalid {
                [b @ 0x80..=0x9f] => char::from(*b),
                _ => char::REPLACEMENT_CHARACTER,
            };
            cleaner.step(c);
        }
    }
}

/// Where we are inside a terminal escape sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// Just after ESC.
    AfterEsc,
    /// `ESC` followed by intermediate bytes (0x20–0x2F), waiting for the final byte.
    Intermediate,
    /// Control Sequence: parameter and intermediate bytes until a final byte 0x40–0x7E.
    Csi,
    /// OSC, DCS, SOS, PM or APC: a string that runs until BEL or ST (`ESC \` or 0x9C).
    String,
    /// An ESC inside such a string: `\` ends it, anything else starts a new sequence.
    StringEsc,
}

const ESC: char = '\u{1b}';
const BEL: char = '\u{07}';
const TAB_STOP: usize = 8;

/// Reads characters one by one, dropping escape sequences and writing the visible text.
struct Cleaner<'a> {
    out: &'a mut String,
    state: Escape,
    /// Characters written so far, for tab stops.
    column: usize,
}

impl Cleaner<'_> {
    fn step(&mut self, c: char) {
        self.state = match self.state {
            Escape::None => self.text(c),
            Escape::AfterEsc => match c {
                '[' => Escape::Csi,
                ']' | 'P' | 'X' | '^' | '_' => Escape::String,
                ESC => Escape::AfterEsc,
                '\u{20}'..='\u{2f}' => Escape::Intermediate,
                '\u{30}'..='\u{7e}' => Escape::None,
                // Not a sequence after all: drop the ESC and read `c` as text.
                _ => self.text(c),
            },
            Escape::Intermediate => match c {
                '\u{20}'..='\u{2f}' => Escape::Intermediate,
                '\u{30}'..='\u{7e}' => Escape::None,
                _ => self.text(c),
            },
            Escape::Csi => match c {
                '\u{20}'..='\u{3f}' => Escape::Csi,
                '\u{40}'..='\u{7e}' => Escape::None,
                // A malformed sequence ends at the first character that cannot belong to it.
                _ => self.text(c),
            },
            Escape::String => match c {
                BEL | '\u{9c}' => Escape::None,
                ESC => Escape::StringEsc,
                _ => Escape::String,
            },
            Escape::StringEsc => match c {
                '\\' => Escape::None,
                _ => {
                    self.state = Escape::AfterEsc;
                    self.step(c);
                    self.state
                }
            },
        };
    }

    /// A character outside any escape sequence: kept, dropped, or the start of a sequence.
    fn text(&mut self, c: char) -> Escape {
        match c {
            ESC => return Escape::AfterEsc,
            '\u{9b}' => return Escape::Csi,
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => return Escape::String,
            // Tabs become spaces: the report holds no control characters but newlines.
            '\t' => {
                let width = TAB_STOP - self.column % TAB_STOP;
                self.out.extend(std::iter::repeat_n(' ', width));
                self.column += width;
            }
            c if c.is_control() || is_invisible(c) => {}
            c => {
                self.out.push(c);
                self.column += 1;
            }
        }
        Escape::None
    }
}

/// Characters that change how surrounding text is displayed or hide text from a reader while a
/// model still reads it: bidi controls, zero-width characters, fillers, tag characters (used for
/// "ASCII smuggling") and variation selectors.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}'                       // soft hyphen
        | '\u{034f}'                     // combining grapheme joiner
        | '\u{061c}'                     // Arabic letter mark
        | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' // Hangul fillers
        | '\u{180e}'                     // Mongolian vowel separator
        | '\u{200b}'..='\u{200f}'        // zero-width space/joiners, LRM, RLM
        | '\u{2028}' | '\u{2029}'        // line and paragraph separators
        | '\u{202a}'..='\u{202e}'        // bidi embeddings and overrides
        | '\u{2060}'..='\u{206f}'        // word joiner, invisible operators, bidi isolates
        | '\u{fe00}'..='\u{fe0f}'        // variation selectors
        | '\u{feff}'                     // zero-width no-break space (BOM)
        | '\u{fff9}'..='\u{fffb}'        // interlinear annotation
        | '\u{1d173}'..='\u{1d17a}'      // musical formatting
        | '\u{e0000}'..='\u{e007f}'      // tag characters
        | '\u{e0100}'..='\u{e01ef}'      // variation selectors supplement
    )
}

/// The longest prefix of `text` with at most `max_chars` characters.
pub(crate) fn prefix_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// `text` cut to at most `max_chars` characters, ending in `…` when something was cut.
pub(crate) fn clip(text: &str, max_chars: usize) -> String {
    let kept = prefix_chars(text, max_chars);
    if kept.len() == text.len() {
        return text.to_string();
    }
    let mut out = prefix_chars(text, max_chars.saturating_sub(1)).to_string();
    out.push('…');
    out
}

/// Cuts `text` in place to at most `max_chars` characters, ending in `…` when something was cut.
pub(crate) fn clip_in_place(text: &mut String, max_chars: usize) {
    if prefix_chars(text, max_chars).len() < text.len() {
        let keep = prefix_chars(text, max_chars.saturating_sub(1)).len();
        text.truncate(keep);
        text.push('…');
    }
}

/// Job-derived text for a single line of markdown: sanitized, trimmed and clipped.
pub(crate) fn clean(text: &str, max_chars: usize) -> String {
    clip(sanitize_line(text.as_bytes()).trim(), max_chars)
}

/// A markdown inline code span holding `text` (sanitized) literally: the backtick run around it is longer
/// than any inside, so the text can neither end the span early nor be read as markup.
pub(crate) fn inline_code(text: &str) -> String {
    // Sanitized again so that the span holds whatever the caller passes (a newline could
    // otherwise end the line and start a block).
    let text = sanitize_line(text.as_bytes());
    if text.is_empty() {
        return "(empty)".to_string();
    }
    let fence = "`".repeat(longest_run(&text, '`') + 1);
    // A space keeps a leading or trailing backtick from merging with the delimiter; markdown
    // strips one space on each side.
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// Job-derived text quoted in the headline, which is plain text outside any block: backticks
/// become quotes so the result is one simple code span.
pub(crate) fn headline_quote(text: &str, max_chars: usize) -> String {
    let text = clean(text, max_chars).replace('`', "'");
    if text.is_empty() {
        String::new()
    } else {
        format!("`{text}`")
    }
}

/// The longest run of `c` in `text`.
pub(crate) fn longest_run(text: &str, c: char) -> usize {
    let (mut longest, mut run) = (0, 0);
    for ch in text.chars() {
        run = if ch == c { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_no_controls(s: &str) -> bool {
        s.chars().all(|c| !(c.is_control() || is_invisible(c)))
    }

    #[test]
    fn plain_text_is_kept() {
        assert_eq!(sanitize_line(b"epoch 3 loss=0.25\n"), "epoch 3 loss=0.25");
        assert_eq!(sanitize_line(b"tab\there\r\n"), "tab     here");
        assert_eq!(sanitize_line(b"\tx\x1b[1m\ty"), "        x       y");
        assert_eq!(sanitize_line("日本語 ✓".as_bytes()), "日本語 ✓");
    }

    #[test]
    fn ansi_colours_from_rich_and_loguru_are_removed() {
        // loguru: green time, level padded, cyan location.
        let loguru = b"\x1b[32m2024-05-01 10:00:00.123\x1b[0m | \x1b[1mINFO    \x1b[0m | \x1b[36mtrain\x1b[0m:\x1b[36mmain\x1b[0m:\x1b[36m42\x1b[0m - \x1b[1mloss=0.5\x1b[0m";
        assert_eq!(
            sanitize_line(loguru),
            "2024-05-01 10:00:00.123 | INFO     | train:main:42 - loss=0.5"
        );
        // rich: 256-colour and truecolour SGR, cursor movement, private modes.
        let rich = b"\x1b[38;5;196mError\x1b[0m \x1b[38;2;255;0;0mred\x1b[0m\x1b[2K\x1b[1A\x1b[?25l done\x1b[?25h";
        assert_eq!(sanitize_line(rich), "Error red done");
    }

    #[test]
    fn osc_hyperlinks_keep_their_text_and_clipboard_writes_vanish() {
        let link = b"see \x1b]8;;https://evil.example/x\x1b\\the docs\x1b]8;;\x1b\\ now";
        assert_eq!(sanitize_line(link), "see the docs now");
        let link_bel = b"see \x1b]8;;https://evil.example/x\x07the docs\x1b]8;;\x07 now";
        assert_eq!(sanitize_line(link_bel), "see the docs now");
        let clipboard = b"ok\x1b]52;c;cm0gLXJmIH4K\x07 done";
        assert_eq!(sanitize_line(clipboard), "ok done");
        let title = b"\x1b]0;pwned title\x1b\\visible";
        assert_eq!(sanitize_line(title), "visible");
        // An unterminated OSC hides the rest of the line rather than leaking it.
        assert_eq!(sanitize_line(b"a\x1b]52;c;abc"), "a");
    }

    #[test]
    fn eight_bit_c1_controls_are_removed() {
        // 0x9B is CSI, 0x9D is OSC (terminated by 0x9C ST), as raw bytes.
        assert_eq!(sanitize_line(b"a\x9b31mred\x9b0m b"), "ared b");
        assert_eq!(sanitize_line(b"x\x9d52;c;Zm9v\x9cy"), "xy");
        // The same controls encoded as UTF-8 characters.
        assert_eq!(sanitize_line("a\u{9b}1mb\u{85}c".as_bytes()), "abc");
        assert_eq!(sanitize_line("p\u{90}dcs data\u{9c}q".as_bytes()), "pq");
    }

    #[test]
    fn other_escapes_and_c0_controls_are_removed() {
        assert_eq!(
            sanitize_line(b"\x1b(Bcharset\x1b7saved\x1b8 \x1bPdcs\x1b\\x"),
            "charsetsaved x"
        );
        assert_eq!(
            sanitize_line(b"bell\x07back\x08nul\x00del\x7fend"),
            "bellbacknuldelend"
        );
        assert_eq!(sanitize_line(b"\x1b_apc payload\x1b\\z\x1b^pm\x1b\\"), "z");
        // ESC at the very end, ESC before a non-ASCII character.
        assert_eq!(sanitize_line(b"end\x1b"), "end");
        assert_eq!(sanitize_line("a\u{1b}é".as_bytes()), "aé");
    }

    #[test]
    fn carriage_returns_keep_the_last_redraw() {
        let tqdm = b" 10%|#         | 10/100 [00:01<00:09]\r 50%|#####     | 50/100 [00:05<00:05]\r100%|##########| 100/100 [00:10<00:00]\n";
        assert_eq!(
            sanitize_line(tqdm),
            "100%|##########| 100/100 [00:10<00:00]"
        );
        assert_eq!(sanitize_line(b"dos line\r\n"), "dos line");
        assert_eq!(sanitize_line(b"old\rnew"), "new");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        assert_eq!(sanitize_line(b"a\xffb\xc3"), "a\u{fffd}b\u{fffd}");
        assert_eq!(sanitize_line(b"\xe2\x82"), "\u{fffd}");
    }

    #[test]
    fn bidi_and_invisible_characters_are_removed() {
        // "Trojan source": an RLO makes `exe.txt` display as `txt.exe`.
        let s = sanitize_line("file\u{202e}txt.exe\u{202c} \u{2066}x\u{2069}".as_bytes());
        assert_eq!(s, "filetxt.exe x");
        let hidden = sanitize_line("a\u{200b}b\u{feff}c\u{e0069}\u{e0067}d\u{2028}e".as_bytes());
        assert_eq!(hidden, "abcde");
        assert!(has_no_controls(&s) && has_no_controls(&hidden));
    }

    #[test]
    fn sanitized_output_never_holds_controls_whatever_the_input() {
        // Every two-byte combination around ESC and the C1 range, plus random-ish noise.
        let mut input = Vec::new();
        for a in [
            0x1bu8, 0x9b, 0x9d, 0xc2, 0x07, b'[', b']', b'\\', 0x9c, b'a', 0x0d,
        ] {
            for b in 0u8..=255 {
                input.extend_from_slice(&[a, b, b'x']);
            }
        }
        let out = sanitize_line(&input);
        assert!(has_no_controls(&out), "{out:?}");
    }

    #[test]
    fn clipping_and_quoting() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abcd", 4), "abcd");
        assert_eq!(clip("ééééé", 3), "éé…");
        let mut s = "abcdef".to_string();
        clip_in_place(&mut s, 3);
        assert_eq!(s, "ab…");
        assert_eq!(inline_code("rm -rf"), "`rm -rf`");
        assert_eq!(inline_code("a `b` c"), "``a `b` c``");
        assert_eq!(inline_code("`x``"), "``` `x`` ```");
        assert_eq!(headline_quote("use `x`\x1b[31m", 80), "`use 'x'`");
        assert_eq!(longest_run("a``b```c", '`'), 3);
    }

    #[test]
    fn multi_line_text_keeps_its_line_breaks_and_nothing_else() {
        assert_eq!(
            sanitize_lines("set -e\r\npython a.py\x1b[1m\n\n\tb\u{2028}c\x07"),
            "set -e\npython a.py\n\n        bc"
        );
        assert_eq!(sanitize_lines("one line"), "one line");
    }
}
