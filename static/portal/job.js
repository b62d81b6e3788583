// The job page: state and logs over a websocket; polling the REST API when it is not there.
// Each state change also re-reads the job, to redraw its attempts and its history (and, once a
// batch has ended, the server's rerun form for it). Every 30 s the page re-reads the job and any log lines it
// lacks even while the socket is live: the scheduler's reason for the wait and its estimated
// start change without a message, and a push can be lost (Redis drops a group's members after
// a day, and messages a busy channel has no room for).
(function () {
  const REFRESH_MS = 30000;
  const RENEW_SOCKET_MS = 12 * 3600 * 1000;  // before Redis forgets the socket's groups (24 h)
  // Log lines the page keeps: it reads the end of a long log, not every line before it, and
  // drops its oldest rows as new ones come (the download has them all).
  const SHOWN_LINES = 5000;
  const HISTORY = 20;  // the events the history lists, as the server draws it (views.HISTORY)
  const root = document.getElementById("job");
  const jobId = root.dataset.job;
  const stateEl = document.getElementById("state");
  const reasonEl = document.getElementById("reason");
  const estimateEl = document.getElementById("estimate");
  const startEl = document.getElementById("estimated-start");
  const aheadEl = document.getElementById("window-ahead");  // the window that will stop it
  const standingEl = document.getElementById("standing");  // where it stands in line
  const pointsEl = document.getElementById("standing-points");
  const shareEl = document.getElementById("standing-share");
  const shardsEl = document.getElementById("shards");
  const logEl = document.getElementById("log");
  const logNoteEl = document.getElementById("log-note");
  const downloadEl = document.getElementById("download-log");
  const downloadUrl = downloadEl.getAttribute("href");
  // The log shown: one worker's (drawn for a gang) or one attempt's (shown from the second).
  const workerEl = document.getElementById("log-worker");
  const attemptEl = document.getElementById("log-attempt");
  const attemptLabelEl = document.getElementById("log-attempt-label");
  const grepEl = document.getElementById("log-grep");
  const liveEl = document.getElementById("live");
  const attemptsEl = document.getElementById("attempts");
  const historyEl = document.getElementById("history-rows");
  const historySummaryEl = document.getElementById("history-summary");
  // Drawn by the server for an elastic gang: the workers each attempt started with.
  const workersColumn = document.getElementById("attempt-workers") !== null;
  const resubmitEl = document.getElementById("resubmit-form");  // drawn hidden while live
  const cancelEl = document.getElementById("cancel-form");  // drawn while live: hidden once ended
  const holdEl = document.getElementById("hold-form");  // for whoever may cancel: shown while queued
  const requeueEl = document.getElementById("requeue-form");  // shown while a shard runs or is scheduled
  const dependsEl = document.getElementById("dependencies-form");  // shown while every shard is queued
  const priorityEl = document.getElementById("priority-form");  // shown while a shard is queued
  const minWorkersEl = document.getElementById("min-workers-form");  // a training job: shown while queued
  const runtimeLimitEl = document.getElementById("runtime-limit-form");  // shown while a shard lives
  const requestEl = document.getElementById("request-form");  // shown while a shard is queued
  const constraintsEl = document.getElementById("constraints-form");  // shown while a shard is queued
  const shardLimitEl = document.getElementById("shard-limit-form");  // drawn while live: hidden once ended
  const maxRunningEl = document.getElementById("max-running-shards");  // a batch's limit, as drawn
  const HOLD_LABELS = {hold: "Hold: do not start it yet", release: "Release the hold"};
  const ENDED = ["succeeded", "failed", "canceled"];
  const seen = new Set();  // agents may resend a line: show it once
  let shown = 0;  // line rows in the log, its gaps aside
  let after = 0;
  let pollTimer = null;
  let reading = null;  // the log read in flight: one at a time, each from the last line shown
  let scopes = 0;  // bumped when another worker or attempt is chosen: reads of the last one stop
  let held = null;  // lines from the socket while the page catches up: shown after, in order
  // Whether #rerun-form is as the server draws it for the batch ended: it drew the page after
  // the end when it drew #resubmit-form shown (it draws both only for who may run it again).
  let rerunEnded = Boolean(resubmitEl) && !resubmitEl.hidden;

  function showState(state, reason) {
    stateEl.textContent = state;
    stateEl.className = "badge state-" + state;
    if (reason !== undefined) reasonEl.textContent = reason;
  }

  function showEstimate(iso) {
    // As the server draws it: minutes, in UTC.
    const minute = iso ? new Date(iso).toISOString().substring(0, 16).replace("T", " ") : "";
    estimateEl.hidden = !iso;
    startEl.dateTime = iso || "";
    startEl.textContent = iso ? minute + " UTC" : "";
  }

  function showStanding(standing) {
    standingEl.hidden = !standing;
    standingEl.textContent = standing ? standing.sentence : "";
    pointsEl.hidden = !(standing && standing.points_sentence);
    pointsEl.textContent = standing ? standing.points_sentence : "";
    const share = standing && standing.team_share;
    shareEl.hidden = !share;
    shareEl.textContent = share ? share.sentence : "";
  }

  function showShards(job) {
    if (!shardsEl || !job.shard_states) return;
    const counts = Object.entries(job.shard_states).map(function (entry) {
      return entry[1] + " " + entry[0];
    });
    // A rerun of some of a batch's shards has fewer than its count: "2 of 5", as drawn.
    const rows = Object.values(job.shard_states).reduce(function (a, n) { return a + n; }, 0);
    const count = rows === job.shards ? String(rows) : rows + " of " + job.shards;
    const live = Object.keys(job.shard_states).some(function (s) { return !ENDED.includes(s); });
    // Each count links to the batch's shards in that state, as drawn.
    const list = document.getElementById("shard-list");
    shardsEl.textContent = count + ": ";
    Object.keys(job.shard_states).forEach(function (state, i) {
      if (i) shardsEl.append(", ");
      const link = document.createElement("a");
      link.className = "shard-state";
      link.href = list.getAttribute("href") + "&state=" + encodeURIComponent(state);
      link.title = "List its shards " + state;
      link.textContent = counts[i];
      shardsEl.append(link);
    });
    if (live) shardsEl.append(" (cancel stops them all)");
    if (maxRunningEl) {
      const limit = job.max_running_shards;
      maxRunningEl.textContent = limit
        ? "at most " + limit + " run at once; the others wait until one ends" : "no limit";
    }
  }

  function logScope() {
    // The logs endpoint's parameters for the worker and the attempt chosen.
    let query = "";
    if (workerEl && workerEl.value) query += "&worker=" + workerEl.value;
    if (attemptEl.value) query += "&attempt=" + attemptEl.value;
    if (grepEl.value) query += "&grep=" + encodeURIComponent(grepEl.value);
    return query;
  }

  function inScope(line) {
    // As the server keeps them: its worker, its attempt, and its text holding the text asked,
    // in any case.
    return (!workerEl || !workerEl.value || String(line.worker) === workerEl.value) &&
      (!attemptEl.value || String(line.attempt) === attemptEl.value) &&
      line.text.toLowerCase().includes(grepEl.value.toLowerCase());
  }

  function addLines(lines) {
    for (const line of lines) {
      if (!inScope(line)) continue;  // a line pushed live of another worker or attempt
      const key = line.attempt + "." + line.worker + "." + line.seq;
      if (seen.has(key)) continue;
      seen.add(key);
      const row = document.createElement("span");
      row.className = line.stream;
      row.dataset.key = key;
      row.textContent = "[" + line.attempt + "." + line.worker + "] " + line.text + "\n";
      logEl.appendChild(row);
      shown += 1;
    }
    while (shown > SHOWN_LINES) {  // the oldest rows go, a gap's with them
      const oldest = logEl.firstElementChild;
      if (oldest.dataset.key) {
        seen.delete(oldest.dataset.key);
        shown -= 1;
      }
      oldest.remove();
      logNoteEl.hidden = false;
    }
  }

  function addGap() {
    // Lines the page did not read (a long log's start, or a backlog after a long absence).
    const row = document.createElement("span");
    row.className = "gap";
    row.textContent = "[lines not shown: Download log has them all]\n";
    logEl.appendChild(row);
    logNoteEl.hidden = false;
  }

  function clock(iso) {
    // As the server draws it: the day and the second, in UTC.
    return iso ? new Date(iso).toISOString().substring(0, 19).replace("T", " ") : "";
  }

  function where(nodes) {
    // As the server draws it (Attempt.where): "gpu-a (GPUs 0, 1), gpu-b (GPU 3, 250m)".
    return nodes.map(function (n) {
      if (!n.gpus.length) return n.node;
      const each = n.gpus.length > 1 ? " each" : "";
      const share = n.gpu_milli < 1000 ? ", " + n.gpu_milli + "m" + each : "";
      return n.node + " (GPU" + (n.gpus.length > 1 ? "s " : " ") + n.gpus.join(", ") + share + ")";
    }).join(", ");
  }

  function startedWith(workers, whole) {
    // As the server says it (views.started_with).
    if (workers === whole) return "all " + whole;
    return "started with " + workers + " of " + whole + " workers";
  }

  function tableRow(values) {
    // A row of text cells (never markup: reasons and logs are the jobs' own words).
    const row = document.createElement("tr");
    for (const value of values) {
      const cell = document.createElement("td");
      cell.textContent = value;
      row.appendChild(cell);
    }
    return row;
  }

  function showAttempts(job) {
    const rows = job.attempts.map(function (a) {
      const cells = [a.number, a.cluster || "", where(a.nodes), a.outcome || "live",
                     a.exit_code === null ? "" : a.exit_code, a.reason,
                     clock(a.started_at), clock(a.ended_at), a.runtime_used, a.cpu_used,
                     a.memory_used, a.gpu_used];
      if (workersColumn) cells.splice(2, 0, startedWith(a.workers, job.workers));
      return tableRow(cells);
    });
    if (rows.length) attemptsEl.replaceChildren(...rows);
    for (const a of job.attempts) {  // each attempt may be chosen for the log
      if (!attemptEl.querySelector('option[value="' + a.number + '"]')) {
        attemptEl.append(new Option(String(a.number), String(a.number)));
      }
    }
    attemptLabelEl.hidden = job.attempts.length < 2;
  }

  async function fetchHistory() {
    // The last HISTORY events, redrawn newest first as the server draws them.
    let page;
    try {
      const response = await fetch("/api/v1/jobs/" + jobId + "/events/?last=" + HISTORY);
      if (!response.ok) return;
      page = await response.json();
    } catch (error) {
      return;  // the next read of the job asks again
    }
    const rows = page.events.slice().reverse().map(function (e) {
      return tableRow([clock(e.time), e.from_state || "-", e.to_state, e.reason]);
    });
    historyEl.replaceChildren(...rows);
    const n = rows.length;
    historySummaryEl.textContent = "History (the last " + n + " event" + (n === 1 ? "" : "s") +
      ", newest first" + (page.earlier ? "; the API's events has them all" : "") + ")";
  }

  function showHold(verb) {
    // The verb the server offers this reader: hold, release, or none (not queued, or held by
    // a platform admin and read by someone else).
    holdEl.hidden = !verb;
    if (!verb) return;
    const button = holdEl.querySelector("button");
    holdEl.action = "/jobs/" + jobId + "/" + verb + "/";
    button.id = verb;
    button.textContent = HOLD_LABELS[verb];
  }

  async function drawnRerun() {
    // The rerun form as the server draws it on a fresh copy of this page (the count of shards
    // that did not succeed, an idempotency key of its own, a CSRF token); null if it draws
    // none (every shard succeeded), undefined if the page could not be read.
    let response;
    try {
      response = await fetch("/jobs/" + jobId + "/", {cache: "no-store"});
      if (!response.ok || response.redirected) return undefined;  // a login page has none
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      return page.getElementById("rerun-form");
    } catch (error) {
      return undefined;
    }
  }

  async function showRerun(ended) {
    // Only the server draws the form, so it is read once the batch has ended while the page
    // is open, and removed while the batch lives (the server draws none then).
    if (ended === rerunEnded) return;
    rerunEnded = ended;  // one read at a time
    const form = ended ? await drawnRerun() : null;
    if (form === undefined) {
      rerunEnded = false;  // asked again on the next read of the job
      return;
    }
    const shown = document.getElementById("rerun-form");
    if (shown) shown.remove();
    if (form) resubmitEl.after(form);  // where the server draws it
  }

  async function fetchJob() {
    let response;
    try {
      response = await fetch("/api/v1/jobs/" + jobId + "/");
    } catch (error) {
      return;  // offline: the next refresh or state change reads it again
    }
    if (!response.ok) return;
    const job = await response.json();
    // A batch: its own state, and why its first shard waits; a job: why it waits or ended.
    showState(job.batch_state || job.state,
              job.shard_states ? job.pending_message : job.pending_message || job.end_reason);
    showEstimate(job.estimated_start);
    showStanding(job.standing);
    aheadEl.hidden = !job.window_ahead;
    aheadEl.textContent = job.window_ahead ? job.window_ahead.sentence : "";
    showShards(job);
    showAttempts(job);
    fetchHistory();
    // A batch has ended once every shard has, whatever became of the first.
    const states = job.shard_states ? Object.keys(job.shard_states) : [job.state];
    const ended = states.every(function (s) { return ENDED.includes(s); });
    if (ended) {
      if (resubmitEl) resubmitEl.hidden = false;
      if (cancelEl) cancelEl.hidden = true;
      if (shardLimitEl) shardLimitEl.hidden = true;
    }
    if (resubmitEl && job.shard_states) showRerun(ended);
    if (holdEl) showHold(job.hold_verb);
    if (dependsEl) dependsEl.hidden = !states.every(function (s) { return s === "queued"; });
    if (priorityEl) priorityEl.hidden = !states.includes("queued");
    if (minWorkersEl) minWorkersEl.hidden = !states.includes("queued");
    if (runtimeLimitEl) runtimeLimitEl.hidden = ended;
    if (requestEl) requestEl.hidden = !states.includes("queued");
    if (constraintsEl) constraintsEl.hidden = !states.includes("queued");
    if (requeueEl) {
      requeueEl.hidden = !states.some(function (s) { return s === "scheduled" || s === "running"; });
    }
  }

  function sleep(ms) {
    return new Promise(function (resolve) { setTimeout(resolve, ms); });
  }

  // How long to wait before asking again: the server's Retry-After (a 429 from the API's rate
  // limit says it, a 503 from a server that lost its database too), else a few seconds, longer
  // after each failure in a row, at most a minute.
  function backoff(response, failures) {
    const seconds = response ? Number(response.headers.get("Retry-After")) : NaN;
    if (seconds > 0) return seconds * 1000;
    return Math.min(3000 * 2 ** (failures - 1), 60000);
  }

  async function readLogs() {
    // First the last SHOWN_LINES lines after the last one shown (a gap marked where lines
    // were left out before them), then a page at a time (at most 1000 lines) until one is
    // empty. A page refused or lost is asked for again after a wait, from the last line
    // shown, so the backlog never keeps a hole it does not mark.
    let failures = 0;
    let tail = "&last=" + SHOWN_LINES;
    const scope = logScope();
    const mine = scopes;
    for (;;) {
      let response = null;
      let page = null;
      try {
        response = await fetch("/api/v1/jobs/" + jobId + "/logs/?after=" + after + tail + scope);
        if (response.ok) page = await response.json();
      } catch (error) {
        page = null;  // offline, or a broken answer: wait and ask again
      }
      if (mine !== scopes) return;  // another worker or attempt was chosen meanwhile
      if (!page) {
        failures += 1;
        await sleep(backoff(response, failures));
        continue;
      }
      failures = 0;
      tail = "";
      if (page.earlier) addGap();
      if (!page.lines.length) return;
      addLines(page.lines);
      after = page.next;
    }
  }

  function fetchLogs() {
    if (!reading) reading = readLogs().finally(function () { reading = null; });
    return reading;
  }

  let scoped = "";  // the scope the lines shown were read for
  async function rescope() {
    // Another worker, attempt or text chosen: its lines from the end of its log, the download
    // its, and the page's address says it (#worker=3&attempt=2&grep=loss), to be shared or
    // reloaded.
    const scope = logScope();
    if (scope === scoped) return;  // the same choice again (Enter after typing)
    scoped = scope;
    scopes += 1;
    const mine = scopes;
    downloadEl.href = downloadUrl + (scope ? "?" + scope.substring(1) : "");
    history.replaceState(null, "", scope ? "#" + scope.substring(1) : location.pathname);
    if (reading) await reading;  // it stops at its next step
    if (mine !== scopes) return;  // chosen again meanwhile: the last choice reads
    logEl.replaceChildren();
    seen.clear();
    shown = 0;
    after = 0;
    logNoteEl.hidden = true;
    fetchLogs();
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
    if (reading) return;  // a read waits out a refusal: asking more would only prolong it
    await fetchLogs();
    await fetchJob();
  }

  function refresh() {
    if (pollTimer) return;  // polling reads both every 2 s already
    catchUp();
    fetchJob();
  }

  function startPolling() {
    liveEl.textContent = "polling";
    if (!pollTimer) pollTimer = setInterval(poll, 2000);
  }

  let shardsRead = null;
  function shardsMoved() {
    // Another shard of this batch moved: read the batch again, once for a burst of them (a
    // batch of thousands ends shard by shard).
    if (shardsRead) return;
    shardsRead = setTimeout(function () { shardsRead = null; fetchJob(); }, 1000);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/jobs/" + jobId + "/");
    let renewing = false;
    const renewal = setTimeout(function () { renewing = true; socket.close(); }, RENEW_SOCKET_MS);
    socket.onopen = function () {
      liveEl.textContent = "live";
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
      catchUp();  // what was written before the socket opened
    };
    socket.onmessage = function (event) {
      const message = JSON.parse(event.data);
      if (message.type === "state") {
        // A batch's page is headed with the batch's state, which the job read gives.
        if (!shardsEl) showState(message.state, message.reason);
        fetchJob();
      }
      if (message.type === "shards") shardsMoved();
      if (message.type === "logs") {
        if (held) held.push(...message.lines);
        else addLines(message.lines);
      }
    };
    socket.onclose = function () {
      clearTimeout(renewal);
      if (renewing) { connect(); return; }  // a fresh socket joins its groups afresh
      startPolling();
      setTimeout(connect, 5000);
    };
  }

  function chosenInAddress() {
    // The choice an address brings (#worker=3&attempt=2&grep=loss), where the page offers it.
    const asked = new URLSearchParams(location.hash.substring(1));
    let chosen = false;
    for (const [name, select] of [["worker", workerEl], ["attempt", attemptEl]]) {
      const value = asked.get(name);
      if (select && value && select.querySelector('option[value="' + CSS.escape(value) + '"]')) {
        select.value = value;
        chosen = true;
      }
    }
    const grep = (asked.get("grep") || "").substring(0, grepEl.maxLength);
    if (grep) {
      grepEl.value = grep;
      chosen = true;
    }
    if (chosen) {
      attemptLabelEl.hidden = attemptLabelEl.hidden && !attemptEl.value;
      downloadEl.href = downloadUrl + "?" + logScope().substring(1);
    }
  }

  chosenInAddress();
  scoped = logScope();
  if (workerEl) workerEl.addEventListener("change", rescope);
  attemptEl.addEventListener("change", rescope);
  // Typing narrows the lines once it pauses; Enter or leaving the box at once.
  let typing = null;
  grepEl.addEventListener("input", function () {
    clearTimeout(typing);
    typing = setTimeout(rescope, 400);
  });
  grepEl.addEventListener("change", function () {
    clearTimeout(typing);
    rescope();
  });
  connect();
  setInterval(refresh, REFRESH_MS);
})();
