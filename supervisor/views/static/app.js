// supervise serve: live updates over server-sent events, and the action buttons.
// The server sends HTML it has escaped; this script never builds markup from data.
(function () {
  "use strict";
  const body = document.body;
  const live = document.getElementById("live");
  const flash = document.getElementById("flash");
  const meta = document.querySelector('meta[name="csrf-token"]');
  let received = performance.now();

  // The same form as supervisor.views.model.duration: 45s, 3m05s, 2h07m, 3d04h.
  function duration(s) {
    s = Math.max(0, Math.floor(s));
    const two = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d" + two(Math.floor((s % 86400) / 3600)) + "h";
  }

  // Times in state count up (data-age) and resumes count down (data-down) between updates.
  function tick() {
    const passed = (performance.now() - received) / 1000;
    for (const el of document.querySelectorAll(".age[data-age]")) {
      if (el.dataset.age !== "") el.textContent = duration(parseFloat(el.dataset.age) + passed);
    }
    for (const el of document.querySelectorAll(".age[data-down]")) {
      el.textContent = duration(parseFloat(el.dataset.down) - passed);
    }
  }
  setInterval(tick, 1000);

  function say(text, bad) {
    flash.textContent = text;
    flash.className = bad ? "bad" : "ok";
  }

  // The output box opens at its newest line and follows new output while the reader is at
  // its bottom; scrolled up, it stays where they are until they scroll back down.
  const SLACK = 8; // pixels from the bottom that still count as "at the bottom"
  let following = true;
  const output = () => document.getElementById("output");
  const atBottom = (el) => el.scrollHeight - el.scrollTop - el.clientHeight <= SLACK;
  function stick(top) {
    const el = output();
    if (!el) return;
    el.scrollTop = following || top === undefined ? el.scrollHeight : top;
  }
  document.addEventListener("scroll", (e) => {
    if (e.target === output()) following = atBottom(e.target);
  }, true);
  stick();

  const url = body.dataset.stream;
  const target = document.querySelector("[data-event]");
  if (url && target && window.EventSource) {
    const source = new EventSource(url);
    source.addEventListener(target.dataset.event, (e) => {
      const before = output();
      const top = before ? before.scrollTop : undefined;
      target.innerHTML = e.data;
      stick(top);
      received = performance.now();
      body.dataset.updates = String(parseInt(body.dataset.updates || "0", 10) + 1);
    });
    source.onopen = () => { live.textContent = "live"; live.className = "live on"; };
    source.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-verb]");
    if (!button || !meta) return;
    if (!window.confirm(button.dataset.confirm)) return;
    const verb = button.dataset.verb;
    const task = button.dataset.task;
    button.disabled = true;
    try {
      const answer = await fetch(
        "/api/task/" + encodeURIComponent(task) + "/" + encodeURIComponent(verb),
        { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": meta.content } },
      );
      const data = await answer.json().catch(() => ({}));
      if (answer.ok) say(data.message || verb + " requested for " + task, false);
      else say(verb + " refused: " + (data.error || answer.status), true);
    } catch (err) {
      say(verb + " failed: " + err, true);
    } finally {
      button.disabled = false;
    }
  });
})();
