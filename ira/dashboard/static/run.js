// Follows the run's event log over SSE and sends approval decisions through the public API.
(function () {
  const list = document.getElementById("events");
  if (!list) return;
  const runId = list.dataset.run;
  const live = document.getElementById("live");
  const source = new EventSource(`/v1/runs/${encodeURIComponent(runId)}/events/stream?after=${list.dataset.after}`);
  let reloadSoon = null;

  source.addEventListener("run-event", (message) => {
    const event = JSON.parse(message.data);
    if (document.getElementById(`seq-${event.run_seq}`)) return;
    const item = document.createElement("li");
    item.id = `seq-${event.run_seq}`;
    const seq = document.createElement("span");
    seq.className = "seq";
    seq.textContent = event.run_seq;
    const type = document.createElement("strong");
    type.textContent = event.type;
    const at = document.createElement("time");
    at.textContent = event.at;
    const data = document.createElement("code");
    data.textContent = JSON.stringify(event.data);
    item.append(seq, " ", type, " ", at, " ", data);
    list.append(item);
    // State tables are server-rendered: refresh them once the burst of events settles.
    clearTimeout(reloadSoon);
    reloadSoon = setTimeout(() => location.reload(), 1500);
  });
  source.onopen = () => { live.textContent = "live"; live.className = ""; };
  source.onerror = () => { live.textContent = "reconnecting…"; live.className = "warn"; };

  document.querySelectorAll("section.approval button").forEach((button) => {
    button.addEventListener("click", async () => {
      const card = button.closest("section.approval");
      const result = card.querySelector(".result");
      card.querySelectorAll("button").forEach((b) => (b.disabled = true));
      const response = await fetch(`/v1/approvals/${encodeURIComponent(card.dataset.approval)}/decision`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Ira-CSRF": window.IRA_CSRF },
        body: JSON.stringify({ decision: button.dataset.decision, reason: "decided on the dashboard" }),
      });
      const body = await response.json().catch(() => ({}));
      if (response.ok) {
        result.textContent = `Recorded: ${body.state || button.dataset.decision}`;
      } else {
        const error = (body.errors && body.errors[0]) || {};
        result.textContent = `Not applied (${error.code || response.status}): ${error.message || ""}`;
        result.className = "result error";
        card.querySelectorAll("button").forEach((b) => (b.disabled = false));
      }
    });
  });
})();
