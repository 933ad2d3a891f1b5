/* A job's admin page, kept up to date while the job runs: its status, progress, output,
 * timeline, related jobs and buttons, from the admin's live view (JobAdmin.live_view), asked
 * again every `poll_after` seconds until the job reaches a final status. No dependency.
 *
 * The live view sends each field's contents as the page renders them (escaped by the
 * server); a field is replaced only when its contents changed, keeping the output scrolled
 * to its end when it was, and the tracebacks a reader opened open. */
(function () {
  "use strict";

  const notice = document.getElementById("rq-live");
  if (!notice || notice.dataset.final === "true") return;
  const url = notice.dataset.url;
  const shown = new Map();
  // After a failed request the next waits longer, up to MAX_PAUSE seconds.
  const MAX_PAUSE = 30;
  let failures = 0;

  function say(text) {
    if (notice.textContent !== text) notice.textContent = text;
  }

  function fieldBox(name) {
    return document.querySelector(".field-" + name + " .readonly");
  }

  function replace(name, html) {
    const box = fieldBox(name);
    if (!box || shown.get(name) === html) return;
    const pre = box.querySelector(".rq-output pre");
    const atEnd = pre && pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const opened = Array.from(box.querySelectorAll("details")).map((d) => d.open);
    box.innerHTML = html;
    shown.set(name, html);
    box.querySelectorAll("details").forEach((d, n) => {
      if (opened[n]) d.open = true;
    });
    const newPre = box.querySelector(".rq-output pre");
    if (newPre && (atEnd || !pre)) newPre.scrollTop = newPre.scrollHeight;
  }

  function toggle(selector, visible) {
    const item = document.querySelector(selector);
    if (item) item.hidden = !visible;
  }

  function apply(data) {
    for (const [name, html] of Object.entries(data.fields)) replace(name, html);
    toggle("li.rq-cancel", data.can_cancel);
    toggle("li.rq-retry", data.can_retry);
    document.body.dataset.rqStatus = data.status;
  }

  function later(seconds) {
    const wait = () => window.setTimeout(poll, seconds * 1000);
    if (!document.hidden) return wait();
    // A page nobody looks at asks nothing; it asks at once when shown again.
    document.addEventListener("visibilitychange", function shownAgain() {
      if (document.hidden) return;
      document.removeEventListener("visibilitychange", shownAgain);
      poll();
    });
  }

  async function poll() {
    let response;
    try {
      response = await fetch(url, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
    } catch (error) {
      return retry("the server cannot be reached");
    }
    const type = response.headers.get("Content-Type") || "";
    if (response.status === 403 || response.status === 404 || !type.includes("json")) {
      // Logged out (the admin sent its login page), no longer allowed, or the job is gone.
      return say("The page stopped updating: reload it to see the job.");
    }
    if (!response.ok) return retry(`the server answered ${response.status}`);
    const data = await response.json();
    failures = 0;
    apply(data);
    if (data.final) {
      notice.dataset.final = "true";
      return say(`This job is ${data.status}.`);
    }
    say("This page follows the job as it runs.");
    later(data.poll_after);
  }

  function retry(reason) {
    failures += 1;
    const pause = Math.min(2 ** failures, MAX_PAUSE);
    say(`Could not update (${reason}); trying again in ${pause} s.`);
    later(pause);
  }

  poll();
})();
