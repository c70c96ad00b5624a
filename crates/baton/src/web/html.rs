//! HTML for the dashboard: escaping (every value a page shows goes through [`escape`]: job
//! names, commands and output are whatever their owners made them) and the page frame.

/// `text` safe to put between tags or in a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The GPUs a job holds or held ("GPU 0, 1"), or, while it has none, how many it asks for
/// ("2 asked", "none").
pub fn gpus_text(view: &crate::api::JobView) -> String {
    match (view.gpus.as_slice(), view.gpus_requested) {
        ([], 0) => "none".to_string(),
        ([], asked) => format!("{asked} asked"),
        (gpus, _) => format!("GPU {}", gpu_list(gpus)),
    }
}

/// GPU indexes as a list: "0, 1".
pub fn gpu_list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A whole page: `title` (escaped here) and `body` (HTML already escaped by its maker), with
/// the few styles every page shares, readable on a phone.
pub fn page(title: &str, body: &str) -> String {
    frame(title, "", "", body)
}

/// What keeps a page up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    /// It is refreshed when a job changes state.
    Changes,
    /// Also after every GPU sample: it charts what the GPUs do now.
    Samples,
}

/// [`page`], kept up to date by its script as `live` says.
pub fn live_page(title: &str, body: &str, live: Live) -> String {
    let attribute = match live {
        Live::Changes => "",
        Live::Samples => " data-live=\"samples\"",
    };
    frame(
        title,
        "<script src=\"/live.js\" defer></script>",
        attribute,
        body,
    )
}

fn frame(title: &str, head: &str, body_attributes: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">\
         <title>{}</title><style>{STYLE}</style>{head}</head>\
         <body{body_attributes}>{body}</body></html>\n",
        escape(title)
    )
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1rem;color:#222}\
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}\
th,td{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}\
th{background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}\
.bar{display:inline-block;height:.6rem;background:#4a7}\
.alloc{display:inline-block;height:.6rem;background:#c84}\
.key{display:inline-block;width:.7rem;height:.7rem;vertical-align:middle}\
svg.chart{width:100%;max-width:640px;height:auto}.scroll{overflow-x:auto}\
figure{margin:.5rem 0 1rem}figcaption{font-size:.85rem}\
@media(max-width:600px){table{font-size:.8rem;display:block;overflow-x:auto;max-width:100%}\
th,td{padding:.2rem .3rem}}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_a_value_is_shown_as_text() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        let page = page("<b>", "<p>ok</p>");
        let mut view = crate::api::JobView::default();
        assert_eq!(gpus_text(&view), "none");
        view.gpus_requested = 2;
        assert_eq!(gpus_text(&view), "2 asked");
        view.gpus = vec![0, 3];
        assert_eq!(gpus_text(&view), "GPU 0, 3");
        assert!(page.contains("<title>&lt;b&gt;</title>") && page.contains("<p>ok</p>"));
    }
}
