//! Charts for the dashboard, drawn by the server as inline SVG: no script draws them and
//! nothing is fetched for them, so a page with a sparkline per GPU still weighs a few
//! kilobytes. A series is thinned to at most [`MAX_POINTS`] before it is drawn, so a month of
//! per-minute samples costs what an hour does.

use std::fmt::Write;

use baton_core::Millis;

use super::html::escape;
use crate::daemon::views::rfc3339;

/// The most points a line is drawn with.
pub const MAX_POINTS: usize = 240;

/// The colours of a chart's lines, in order.
const COLOURS: [&str; 8] = [
    "#3574b5", "#d0782a", "#3c9a5f", "#a04aa8", "#c23b3b", "#2f8f8f", "#8a7d2a", "#666666",
];

/// One line of a chart: its label and its points (time, value; `None` where the value was not
/// known, drawn as a gap).
pub struct Line {
    pub label: String,
    pub points: Vec<(Millis, Option<f64>)>,
    /// Thinned to each run's largest value rather than its mean: a memory line keeps the spike
    /// that ran a job out of memory.
    pub peaks: bool,
}

/// `points` thinned to at most `max`: each run of consecutive points becomes one, at the run's
/// first time, with the mean (or, with `peaks`, the largest) of its known values.
pub fn thin(
    points: &[(Millis, Option<f64>)],
    max: usize,
    peaks: bool,
) -> Vec<(Millis, Option<f64>)> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let run = points.len().div_ceil(max);
    points
        .chunks(run)
        .map(|chunk| {
            let known: Vec<f64> = chunk.iter().filter_map(|(_, v)| *v).collect();
            let value = (!known.is_empty()).then(|| {
                if peaks {
                    known.iter().copied().fold(f64::MIN, f64::max)
                } else {
                    known.iter().sum::<f64>() / known.len() as f64
                }
            });
            (chunk[0].0, value)
        })
        .collect()
}

/// The polylines of `points` in a `w` by `h` box, time `from..to` across and `0..y_max` up: one
/// polyline per run of known values.
fn polylines(
    points: &[(Millis, Option<f64>)],
    peaks: bool,
    (from, to): (Millis, Millis),
    y_max: f64,
    (x0, y0, w, h): (f64, f64, f64, f64),
    colour: &str,
    width: f64,
) -> String {
    let span = (to - from).max(1) as f64;
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let mut out = String::new();
    let mut run: Vec<String> = Vec::new();
    let flush = |run: &mut Vec<String>, out: &mut String| {
        match run.len() {
            0 => {}
            // A lone point shows as a dot, not as nothing.
            1 => {
                let (x, y) = run[0].split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    out,
                    "<circle cx=\"{x}\" cy=\"{y}\" r=\"{}\" fill=\"{colour}\"/>",
                    width.max(1.5)
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{width}\" \
                     points=\"{}\"/>",
                    run.join(" ")
                );
            }
        }
        run.clear();
    };
    for (at, value) in thin(points, MAX_POINTS, peaks) {
        match value {
            Some(v) => {
                let x = x0 + ((at - from) as f64 / span).clamp(0.0, 1.0) * w;
                let y = y0 + h - (v / y_max).clamp(0.0, 1.0) * h;
                run.push(format!("{x:.1},{y:.1}"));
            }
            None => flush(&mut run, &mut out),
        }
    }
    flush(&mut run, &mut out);
    out
}

/// A small line of `points` over `from..to`, `0..y_max` up, with no axes: a row's recent history.
pub fn sparkline(
    points: &[(Millis, Option<f64>)],
    from: Millis,
    to: Millis,
    y_max: f64,
    label: &str,
) -> String {
    let (w, h) = (120.0, 24.0);
    format!(
        "<svg class=\"spark\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"{}\"><rect width=\"{w}\" height=\"{h}\" fill=\"#f6f6f6\"/>{}</svg>",
        escape(label),
        polylines(
            points,
            false,
            (from, to),
            y_max,
            (0.0, 1.0, w, h - 2.0),
            COLOURS[0],
            1.5
        )
    )
}

/// A chart of `lines` over `from..to`, with its value axis from 0 to `y_max` (the largest value
/// when `None`) labelled by `format`, the two ends of its time axis, and a legend.
pub fn time_chart(
    id: &str,
    title: &str,
    lines: &[Line],
    (from, to): (Millis, Millis),
    y_max: Option<f64>,
    format: impl Fn(f64) -> String,
) -> String {
    let (w, h, left, bottom) = (640.0, 200.0, 64.0, 22.0);
    let (plot_w, plot_h) = (w - left - 8.0, h - bottom - 8.0);
    let y_max = y_max.unwrap_or_else(|| {
        lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
            .fold(0.0, f64::max)
    });
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure id=\"{id}\"><svg class=\"chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"{}\"><rect x=\"{left}\" y=\"8\" width=\"{plot_w}\" height=\"{plot_h}\" \
         fill=\"#fafafa\" stroke=\"#ddd\"/>",
        escape(title)
    );
    for (share, label) in [(1.0, format(y_max)), (0.5, format(y_max / 2.0))] {
        let y = 8.0 + plot_h * (1.0 - share);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
            left + plot_w,
            left - 4.0,
            y + 4.0,
            escape(&label)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>\
         <text x=\"{left}\" y=\"{}\" font-size=\"11\">{}</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
        left - 4.0,
        8.0 + plot_h + 4.0,
        escape(&format(0.0)),
        h - 6.0,
        axis_time(from, to - from),
        left + plot_w,
        h - 6.0,
        axis_time(to, to - from)
    );
    let mut legend = String::new();
    for (i, line) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        svg.push_str(&polylines(
            &line.points,
            line.peaks,
            (from, to),
            y_max,
            (left, 8.0, plot_w, plot_h),
            colour,
            1.5,
        ));
        let _ = write!(
            legend,
            " <span class=\"key\" style=\"background:{colour}\"></span> {}",
            escape(&line.label)
        );
    }
    let _ = write!(
        svg,
        "</svg><figcaption>{}:{legend}</figcaption></figure>",
        escape(title)
    );
    svg
}

/// `at` as the end of a time axis `span` long shows it, UTC: to the second with its date when
/// the span is under an hour, else to the minute.
fn axis_time(at: Millis, span: Millis) -> String {
    let text = rfc3339(at);
    let end = if span < 3_600_000 { 19 } else { 16 };
    text.get(..end).unwrap_or(&text).replace('T', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_mean_of_each_run_and_skips_unknowns() {
        let points: Vec<(Millis, Option<f64>)> = (0..10)
            .map(|i| (i * 10, if i == 3 { None } else { Some(i as f64) }))
            .collect();
        let thinned = thin(&points, 5, false);
        assert_eq!(thinned.len(), 5);
        assert_eq!(thinned[0], (0, Some(0.5)));
        assert_eq!(
            thinned[1],
            (20, Some(2.0)),
            "the unknown point is not a zero"
        );
        assert_eq!(thin(&points[..3], 5, false).len(), 3);
        assert_eq!(
            thin(&points, 5, true)[4],
            (80, Some(9.0)),
            "peaks keep the largest"
        );
    }

    #[test]
    fn a_gap_splits_the_line_and_a_lone_point_is_a_dot() {
        let points = [
            (0, Some(10.0)),
            (10, Some(20.0)),
            (20, None),
            (30, Some(50.0)),
        ];
        let svg = sparkline(&points, 0, 30, 100.0, "GPU 0");
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("aria-label=\"GPU 0\""));
    }

    #[test]
    fn a_chart_labels_its_axes_and_escapes_its_labels() {
        let lines = [Line {
            label: "<b>GPU 0</b>".into(),
            points: vec![(0, Some(40.0)), (60_000, Some(80.0))],
            peaks: false,
        }];
        let svg = time_chart("util", "use", &lines, (0, 60_000), Some(100.0), |v| {
            format!("{v:.0}%")
        });
        assert!(svg.contains(">100%<") && svg.contains(">50%<") && svg.contains(">0%<"));
        assert!(svg.contains("1970-01-01 00:00:00") && svg.contains("1970-01-01 00:01:00"));
        let day = time_chart("d", "use", &lines, (0, 86_400_000), None, |v| v.to_string());
        assert!(
            day.contains(">1970-01-02 00:00<"),
            "to the minute over a day: {day}"
        );
        assert!(svg.contains("&lt;b&gt;GPU 0&lt;/b&gt;") && !svg.contains("<b>"));
        // 40% of the plot's height from its bottom.
        assert!(svg.contains(&format!("{:.1},{:.1}", 64.0, 8.0 + 170.0 * 0.6)));
    }
}
