// Keeps relative times ("3 min ago") and approval countdowns current; the absolute time is the title.
(function () {
  function span(seconds) {
    const s = Math.abs(Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }
  function tick() {
    const now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach((t) => {
      const seconds = (now - Date.parse(t.getAttribute("datetime"))) / 1000;
      t.textContent = seconds < 45 && seconds > -45 ? "just now" : seconds > 0 ? `${span(seconds)} ago` : `in ${span(seconds)}`;
    });
    document.querySelectorAll("[data-countdown]").forEach((t) => {
      const left = Math.round((Date.parse(t.dataset.countdown) - now) / 1000);
      if (left <= 0) { t.textContent = "expired"; t.classList.add("urgent"); return; }
      const m = Math.floor(left / 60), s = left % 60;
      t.textContent = `${m}:${String(s).padStart(2, "0")}`;
      t.classList.toggle("urgent", left < 300);
    });
  }
  tick();
  setInterval(tick, 1000);
  window.IRA_TICK = tick;
})();
