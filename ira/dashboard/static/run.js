// The run page: follows the run's event log over SSE, refreshes the state sections in place
// (no page reload), and sends a decision through the public API after a confirmation.
(function () {
  const list = document.getElementById("events");
  if (!list) return;
  const runId = list.dataset.run;
  // The CSRF value is in a <meta> tag: the page's Content-Security-Policy allows no inline script.
  const csrf = (document.querySelector('meta[name="ira-csrf"]') || {}).content || "";
  const live = document.getElementById("live");
  const source = new EventSource(`/v1/runs/${encodeURIComponent(runId)}/events/stream?after=${list.dataset.after}`);
  let refreshSoon = null;

  function eventItem(event) {
    const item = document.createElement("li");
    item.id = `seq-${event.run_seq}`;
    item.className = "fresh";
    const seq = Object.assign(document.createElement("span"), { className: "seq", textContent: event.run_seq });
    const text = Object.assign(document.createElement("span"), { className: "text", textContent: `${event.text} ` });
    text.append(Object.assign(document.createElement("span"), { className: "type", textContent: event.type }));
    const at = document.createElement("time");
    at.setAttribute("datetime", event.at);
    at.setAttribute("data-ago", "");
    at.title = event.at;
    const details = document.createElement("details");
    details.append(Object.assign(document.createElement("summary"), { textContent: "data" }),
                   Object.assign(document.createElement("pre"), { textContent: JSON.stringify(event.data, null, 2) }));
    text.append(" ", details);
    item.append(seq, text, at);
    return item;
  }

  // Never swap a section under someone typing a reason or a note, or with the dialog open.
  function busy() {
    const dialog = document.getElementById("confirm");
    const fields = document.querySelectorAll("[data-live] textarea, [data-live] input");
    return [...fields].some((f) => f.value || document.activeElement === f) || (dialog && dialog.open);
  }

  // Fetch this page again and swap every [data-live] section whose content changed.
  async function refresh() {
    if (busy()) { refreshSoon = setTimeout(refresh, 2000); return; }
    const response = await fetch(location.pathname, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    fresh.querySelectorAll("[data-live][id]").forEach((section) => {
      const current = document.getElementById(section.id);
      if (current && current.innerHTML !== section.innerHTML) current.replaceWith(document.adoptNode(section));
      else if (!current && section.id === "decision") document.getElementById("run-head").after(document.adoptNode(section));
    });
    bindDecision();
    if (window.IRA_TICK) window.IRA_TICK();
  }

  source.addEventListener("run-event", (message) => {
    const event = JSON.parse(message.data);
    if (document.getElementById(`seq-${event.run_seq}`)) return;
    list.append(eventItem(event));
    list.dataset.after = event.run_seq;
    clearTimeout(refreshSoon);
    refreshSoon = setTimeout(refresh, 400);
  });
  source.onopen = () => { live.textContent = "live"; live.className = ""; };
  source.onerror = () => { live.textContent = "reconnecting…"; live.className = "warn"; };

  function confirmDecision(decision, reason) {
    const dialog = document.getElementById("confirm");
    const title = decision === "approve" ? "File this ticket?" : "Reject this draft?";
    const text = decision === "approve"
      ? "ira will create the ticket exactly as shown, once."
      : "The run ends without a ticket.";
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = reason ? `${text} Reason: “${reason}”` : text;
    return new Promise((resolve) => {
      const yes = document.getElementById("confirm-yes"), no = document.getElementById("confirm-no");
      const done = (answer) => { dialog.close(); yes.onclick = no.onclick = null; resolve(answer); };
      yes.onclick = () => done(true);
      no.onclick = () => done(false);
      dialog.oncancel = () => done(false);
      dialog.showModal();
    });
  }

  function bindDecision() {
    const card = document.querySelector("#decision[data-approval]");
    if (!card || card.dataset.bound) return;
    card.dataset.bound = "1";
    card.querySelectorAll("button[data-decision]").forEach((button) => {
      button.addEventListener("click", async () => {
        const result = card.querySelector(".result");
        const reason = (document.getElementById("reason").value || "").trim();
        if (!(await confirmDecision(button.dataset.decision, reason))) return;
        card.querySelectorAll("button[data-decision]").forEach((b) => (b.disabled = true));
        result.className = "result";
        result.textContent = "Recording…";
        const response = await fetch(`/v1/approvals/${encodeURIComponent(card.dataset.approval)}/decision`, {
          method: "POST",
          credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-Ira-CSRF": csrf },
          body: JSON.stringify({ decision: button.dataset.decision, reason: reason || null }),
        });
        const body = await response.json().catch(() => ({}));
        if (response.ok) {
          result.textContent = `Recorded: ${body.state || button.dataset.decision}`;
          document.getElementById("reason").value = "";
          setTimeout(refresh, 300);
        } else {
          const error = (body.errors && body.errors[0]) || {};
          result.textContent = `Not applied (${error.code || response.status}): ${error.message || ""}`;
          result.className = "result error";
          card.querySelectorAll("button[data-decision]").forEach((b) => (b.disabled = false));
        }
      });
    });
  }
  bindDecision();

  // Work items: draft anyway after a failed branch, or close a manual repair with a note.
  document.addEventListener("submit", async (submitted) => {
    const form = submitted.target.closest("form.work-item");
    if (!form) return;
    submitted.preventDefault();
    const result = form.querySelector(".result");
    const data = Object.fromEntries([...new FormData(form)].map(([k, v]) => [k, v || null]));
    // a second submit button (retry) names its own route; the form's route is the default
    const action = (submitted.submitter && submitted.submitter.dataset.action) || form.dataset.action;
    const response = await fetch(action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Ira-CSRF": csrf },
      body: JSON.stringify(data),
    });
    const body = await response.json().catch(() => ({}));
    const error = (body.errors && body.errors[0]) || {};
    result.textContent = response.ok ? "Done." : `Not applied: ${error.message || response.status}`;
    result.className = response.ok ? "result" : "result error";
    if (response.ok) form.querySelectorAll("textarea, input").forEach((f) => (f.value = ""));
  });
})();
