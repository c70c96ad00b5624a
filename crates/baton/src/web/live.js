// baton's dashboard: live updates. The daemon sends a `change` event (server-sent events) when
// a job changes state, and a `sample` event after each GPU sample; the page then fetches itself
// once and swaps its body in. Every page follows changes; a page whose body says
// data-live="samples" (it charts what the GPUs do now) follows samples too. No timer polls: a
// burst of events is one fetch, and an event during a fetch is one more fetch after it (the
// page fetched may predate it).
(function () {
  "use strict";
  let fetching = false;
  let again = false;
  async function refresh() {
    fetching = true;
    try {
      const answer = await fetch(location.pathname + location.search, {
        credentials: "same-origin",
      });
      if (!answer.ok) return;
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      document.body.replaceWith(page.body);
      document.dispatchEvent(new Event("baton:updated"));
    } catch (_) {
      // The daemon is gone or restarting: the event stream reconnects, and its next event
      // fetches again.
    } finally {
      fetching = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }
  function soon() {
    if (fetching) again = true;
    else refresh();
  }
  const events = new EventSource("/events");
  // A change between the page's render and the stream's start (or while the stream was down,
  // before it reconnected) sends no event: each time the stream opens, fetch once.
  events.addEventListener("open", soon);
  events.addEventListener("change", soon);
  events.addEventListener("sample", function () {
    if (document.body.dataset.live === "samples") soon();
  });
})();
