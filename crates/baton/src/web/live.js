// baton's dashboard: live updates. The daemon sends a `change` event (server-sent events) when
// a job changes state; the page then fetches itself once and swaps its body in. No timer polls:
// a burst of changes is one fetch, started by the first of them.
(function () {
  "use strict";
  let pending = false;
  async function refresh() {
    pending = false;
    const answer = await fetch(location.pathname + location.search, { credentials: "same-origin" });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    document.body.replaceWith(page.body);
    document.dispatchEvent(new Event("baton:updated"));
  }
  const events = new EventSource("/events");
  events.addEventListener("change", function () {
    if (!pending) {
      pending = true;
      queueMicrotask(refresh);
    }
  });
})();
