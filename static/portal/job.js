// The job page: state and logs over a websocket; polling the REST API when it is not there.
// Each state change also re-reads the job, to redraw its attempts.
(function () {
  const root = document.getElementById("job");
  const jobId = root.dataset.job;
  const stateEl = document.getElementById("state");
  const reasonEl = document.getElementById("reason");
  const logEl = document.getElementById("log");
  const liveEl = document.getElementById("live");
  const attemptsEl = document.getElementById("attempts");
  const seen = new Set();  // agents may resend a line: show it once
  let after = 0;
  let pollTimer = null;
  let held = null;  // lines from the socket while the page catches up: shown after, in order

  function showState(state, reason) {
    stateEl.textContent = state;
    stateEl.className = "badge state-" + state;
    if (reason !== undefined) reasonEl.textContent = reason;
  }

  function addLines(lines) {
    for (const line of lines) {
      const key = line.attempt + "." + line.worker + "." + line.seq;
      if (seen.has(key)) continue;
      seen.add(key);
      const row = document.createElement("span");
      row.className = line.stream;
      row.textContent = "[" + line.attempt + "." + line.worker + "] " + line.text + "\n";
      logEl.appendChild(row);
    }
  }

  function clock(iso) {
    return iso ? new Date(iso).toISOString().substring(11, 19) : "";
  }

  function showAttempts(attempts) {
    const rows = attempts.map(function (a) {
      const row = document.createElement("tr");
      const cells = [a.number, a.cluster || "", a.outcome || "live",
                     a.exit_code === null ? "" : a.exit_code, a.reason,
                     clock(a.started_at), clock(a.ended_at)];
      for (const value of cells) {
        const cell = document.createElement("td");
        cell.textContent = value;
        row.appendChild(cell);
      }
      return row;
    });
    if (rows.length) attemptsEl.replaceChildren(...rows);
  }

  async function fetchJob() {
    const response = await fetch("/api/v1/jobs/" + jobId + "/");
    if (!response.ok) return;
    const job = await response.json();
    showState(job.state, job.pending_message);
    showAttempts(job.attempts);
  }

  async function fetchLogs() {
    // The endpoint gives a page at a time (at most 1000 lines): read on until one is empty.
    for (;;) {
      const response = await fetch("/api/v1/jobs/" + jobId + "/logs/?after=" + after);
      if (!response.ok) return;
      const page = await response.json();
      if (!page.lines.length) return;
      addLines(page.lines);
      after = page.next;
    }
  }

  async function catchUp() {
    if (held) return;  // already catching up: that loop reads on to the end
    held = [];
    try {
      await fetchLogs();
    } finally {
      const lines = held;
      held = null;
      addLines(lines);  // those also fetched are skipped as seen
    }
  }

  async function poll() {
    await fetchLogs();
    await fetchJob();
  }

  function startPolling() {
    liveEl.textContent = "polling";
    if (!pollTimer) pollTimer = setInterval(poll, 2000);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/jobs/" + jobId + "/");
    socket.onopen = function () {
      liveEl.textContent = "live";
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
      catchUp();  // what was written before the socket opened
    };
    socket.onmessage = function (event) {
      const message = JSON.parse(event.data);
      if (message.type === "state") {
        showState(message.state, message.reason);
        fetchJob();
      }
      if (message.type === "logs") {
        if (held) held.push(...message.lines);
        else addLines(message.lines);
      }
    };
    socket.onclose = function () {
      startPolling();
      setTimeout(connect, 5000);
    };
  }

  connect();
})();
