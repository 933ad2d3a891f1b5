// The queue dashboard's live refresh: every few seconds, fetch the page's body again
// (the server renders it: charts included) and swap it in. Nothing is fetched while the
// tab is hidden or while the person paused it, and the body is not swapped while the
// keyboard's focus is in it. The window links (last hour / day) switch
// without a reload. No dependency; without this script the page is a plain snapshot.

const live = document.getElementById("rq-live");
const toggle = document.getElementById("rq-live-toggle");
const status = document.getElementById("rq-live-status");

if (live && toggle && status) {
  // The body says how long until the next look (longer for the day's window).
  const interval = () => Number(live.querySelector(".rq-body")?.dataset.interval) || 5000;
  let paused = false;
  let timer = null;
  let pending = null;

  const say = (text) => { status.textContent = text; };
  const stop = () => { clearTimeout(timer); timer = null; };
  const schedule = () => {
    stop();
    if (!paused && !document.hidden) timer = setTimeout(refresh, interval());
  };

  async function refresh() {
    stop();
    pending?.abort();
    const controller = new AbortController();
    pending = controller;
    const url = new URL(live.dataset.liveUrl, window.location.href);
    url.searchParams.set("window", live.dataset.window);
    try {
      const response = await fetch(url, {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
        signal: controller.signal,
      });
      if (response.redirected || response.status === 403) {
        say("Live updates stopped: your session ended. Reload the page to log in again.");
        paused = true;
        toggle.hidden = true;
        return;
      }
      if (!response.ok) {
        say(`Live update failed (HTTP ${response.status}); trying again.`);
      } else if (live.contains(document.activeElement)) {
        // Swapping the body would take the keyboard's focus away: wait until it leaves.
        say("Live updates wait while a link of the dashboard has the focus.");
      } else {
        live.innerHTML = await response.text();
        say("");
      }
    } catch (error) {
      if (error.name === "AbortError") return;
      say("Live update failed (no connection); trying again.");
    } finally {
      if (pending === controller) pending = null;
    }
    schedule();
  }

  toggle.hidden = false;
  toggle.addEventListener("click", () => {
    paused = !paused;
    toggle.setAttribute("aria-pressed", String(paused));
    toggle.textContent = paused ? "Resume live updates" : "Pause live updates";
    say(paused ? "Live updates paused." : "");
    if (paused) stop(); else refresh();
  });

  for (const link of document.querySelectorAll(".rq-window a[data-window]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      live.dataset.window = link.dataset.window;
      for (const other of document.querySelectorAll(".rq-window a[data-window]")) {
        const current = other === link;
        other.classList.toggle("rq-current", current);
        if (current) other.setAttribute("aria-current", "true");
        else other.removeAttribute("aria-current");
      }
      const address = new URL(window.location.href);
      address.searchParams.set("window", link.dataset.window);
      history.replaceState(null, "", address);
      refresh();
    });
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) stop();
    else if (!paused) refresh();
  });
  schedule();
}
