// The dashboard's script: live updates from the server-sent events of /api/stream, and
// the controls of a run's page. It writes run data into the page only as text
// (textContent), never as HTML, so no payload can become markup.
"use strict";

(function () {
  const body = document.body;
  const live = document.getElementById("live");

  // A page opened as ?token=...: the server has set its cookie; keep the token out of the
  // address bar and the history.
  const address = new URL(window.location.href);
  if (address.searchParams.has("token")) {
    address.searchParams.delete("token");
    window.history.replaceState(null, "", address.pathname + address.search + address.hash);
  }

  function causeText(cause) {
    switch (cause.kind) {
      case "stopped":
        return "stopped (" + cause.reason + ")";
      case "failed":
        return cause.message ? "failed (" + cause.code + ": " + cause.message + ")"
                             : "failed (" + cause.code + ")";
      case "indeterminate":
        return "indeterminate (" + cause.reason + ")";
      default:
        return cause.kind.replace(/_/g, " ");
    }
  }

  // As the command line's describe_state.
  function describeState(state) {
    switch (state.kind) {
      case "running":
        return "running (generation " + state.generation + ")";
      case "awaiting":
        return "awaiting " + state.ticket.reason + " (ticket " + state.ticket.correlation_id + ")";
      case "ended":
        return "ended: " + causeText(state.cause);
      default:
        return state.kind;
    }
  }

  // As the table's cells (the server's state_to_json_text).
  function shortState(state) {
    if (state.kind === "ended") {
      const cause = state.cause;
      const extra = cause.reason || cause.code;
      return "ended: " + cause.kind.replace(/_/g, " ") + (extra ? " (" + extra + ")" : "");
    }
    if (state.kind === "awaiting") {
      return "awaiting: " + state.ticket.reason;
    }
    return state.kind;
  }

  // As the server's state_classes: a failure red, a cancel or stop apart from a natural end.
  function stateClasses(state) {
    let classes = "state state-" + state.kind;
    if (state.kind === "ended") {
      classes += " cause-" + state.cause.kind;
    }
    return classes;
  }

  // As the server's format_duration.
  function formatDuration(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) {
      return "";
    }
    if (seconds < 59.95) {
      return seconds.toFixed(1) + "s";
    }
    const whole = Math.max(60, Math.floor(seconds)); // (59.95 and up: a minute)
    const two = (n) => String(n).padStart(2, "0");
    for (const [unit, size, smaller, smallSize] of [
      ["d", 86400, "h", 3600],
      ["h", 3600, "m", 60],
      ["m", 60, "s", 1],
    ]) {
      if (whole >= size) {
        return Math.floor(whole / size) + unit + " " + two(Math.floor((whole % size) / smallSize)) + smaller;
      }
    }
    return "";
  }

  // As the server's timeline_key: a new timeline entry starts where this changes.
  function timelineKey(state) {
    if (state.kind === "running") {
      return "running " + state.generation;
    }
    if (state.kind === "awaiting") {
      return "awaiting " + state.ticket.correlation_id;
    }
    return state.kind;
  }

  // As the server's format_time: a time as local date and time (or the time of day alone),
  // and a time no calendar date stands for (before the year 1, from the year 10000, not
  // finite: a deadline of 1e18, an odd clock's events) as its number.
  const FIRST_TIME_SHOWN = -62135596800;
  const END_OF_TIMES_SHOWN = 253402300800;

  function shownAsDate(at) {
    return Number.isFinite(at) && at >= FIRST_TIME_SHOWN && at < END_OF_TIMES_SHOWN;
  }

  function formatTime(at, withDate) {
    if (!shownAsDate(at)) {
      return String(at);
    }
    const when = new Date(Math.floor(at) * 1000);
    const two = (n) => String(n).padStart(2, "0");
    const time = two(when.getHours()) + ":" + two(when.getMinutes()) + ":" + two(when.getSeconds());
    if (!withDate) {
      return time;
    }
    return when.getFullYear() + "-" + two(when.getMonth() + 1) + "-" + two(when.getDate()) + " " + time;
  }

  // As the server's _age.
  function age(createdAt) {
    if (createdAt === null || createdAt === "" || createdAt === undefined) {
      return "";
    }
    if (!shownAsDate(Number(createdAt))) {
      return formatTime(Number(createdAt), true);
    }
    let seconds = Math.max(0, Math.floor(Date.now() / 1000 - Number(createdAt)));
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (seconds >= size) {
        return Math.floor(seconds / size) + unit;
      }
    }
    return seconds + "s";
  }

  // As the server's run_duration: from the first running (else the creation) to the end
  // (else now); null while the run has neither run nor ended. Times are data- attribute
  // text, "" for none.
  function runDuration(createdAt, startedAt, endedAt) {
    const begun = startedAt !== "" ? startedAt : createdAt;
    if (begun === "" || (startedAt === "" && endedAt === "")) {
      return null;
    }
    const end = endedAt !== "" ? Number(endedAt) : Date.now() / 1000;
    return end - Number(begun);
  }

  function lasted(data) {
    const seconds = runDuration(data.createdAt || "", data.startedAt || "", data.endedAt || "");
    return seconds === null ? "" : formatDuration(seconds);
  }

  function timeText(at) {
    return at === null || at === undefined || at === "" ? "" : formatTime(Number(at), true);
  }

  function dataTime(at) {
    return at === null || at === undefined ? "" : String(at);
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) {
      td.className = className;
    }
    return td;
  }

  function runHref(runId) {
    return "/runs/" + encodeURIComponent(runId);
  }

  function connect(url, onEvent, onOpen) {
    const source = new EventSource(url);
    source.addEventListener("hello", function () {
      live.textContent = "live";
      live.className = "live connected";
      body.dataset.live = "connected";
      onOpen();
    });
    source.addEventListener("run_event", function (message) {
      onEvent(JSON.parse(message.data));
    });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself; the hello that follows reloads what is shown.
      live.textContent = "reconnecting…";
      live.className = "live";
      body.dataset.live = "reconnecting";
    });
  }

  // ---------------------------------------------------------------- the runs table

  function runsPage() {
    const tbody = document.getElementById("runs-body");
    const empty = document.getElementById("no-runs");
    const query = body.dataset.query || "";
    let pending = false;
    let again = false;

    // As the server's counts_bar.
    function showCounts(counts) {
      for (const link of document.querySelectorAll("#counts a.count")) {
        link.querySelector("b").textContent = String(counts[link.dataset.kind] || 0);
      }
      document.querySelector("#counts .total").textContent = counts.total + " runs";
    }

    function render(rows) {
      const fresh = document.createDocumentFragment();
      for (const item of rows) {
        const row = item.row;
        const tr = document.createElement("tr");
        tr.dataset.runId = row.run_id;
        tr.dataset.createdAt = dataTime(row.created_at);
        tr.dataset.startedAt = dataTime(row.started_at);
        tr.dataset.endedAt = dataTime(row.ended_at);
        const link = document.createElement("a");
        link.href = runHref(row.run_id);
        link.textContent = row.run_id;
        const first = document.createElement("td");
        first.appendChild(link);
        tr.appendChild(first);
        tr.appendChild(cell(shortState(row.state), stateClasses(row.state)));
        tr.appendChild(cell(String(row.generation)));
        tr.appendChild(cell(row.thread_id));
        tr.appendChild(cell(row.name || ""));
        tr.appendChild(cell(item.last_event ? item.last_event.text : ""));
        tr.appendChild(cell(age(item.created_at), "age"));
        tr.appendChild(cell(timeText(row.created_at), "created"));
        tr.appendChild(cell(lasted(tr.dataset), "duration"));
        fresh.appendChild(tr);
      }
      tbody.replaceChildren(fresh);
      empty.classList.toggle("hidden", rows.length > 0);
      body.dataset.refreshed = String(Number(body.dataset.refreshed || "0") + 1);
    }

    // At most one reload in flight; events that arrive meanwhile cause one more after it.
    async function reload() {
      if (pending) {
        again = true;
        return;
      }
      pending = true;
      try {
        const [answer, counted] = await Promise.all([
          fetch("/ui/table?" + query, { headers: { Accept: "application/json" } }),
          fetch("/api/counts", { headers: { Accept: "application/json" } }),
        ]);
        if (counted.ok) {
          showCounts(await counted.json());
        }
        if (answer.ok) {
          render(await answer.json());
        }
      } finally {
        pending = false;
        if (again) {
          again = false;
          reload();
        }
      }
    }

    connect("/api/stream", reload, reload);
    window.setInterval(function () {
      for (const tr of tbody.querySelectorAll("tr")) {
        const cellAge = tr.querySelector("td.age");
        if (cellAge) {
          cellAge.textContent = age(tr.dataset.createdAt);
        }
        const cellDuration = tr.querySelector("td.duration");
        if (cellDuration) {
          cellDuration.textContent = lasted(tr.dataset);
        }
      }
    }, 5000);
  }

  // ---------------------------------------------------------------- one run

  function runPage() {
    const runId = body.dataset.runId;
    const apiRun = "/api/runs/" + encodeURIComponent(runId);
    const stateText = document.getElementById("run-state");
    const generation = document.getElementById("run-generation");
    const events = document.getElementById("events-body");
    const record = document.getElementById("record");
    const ticket = document.getElementById("ticket");
    const result = document.getElementById("control-result");
    const failure = document.getElementById("failure");
    const timeline = document.getElementById("timeline");
    let seq = Number(body.dataset.seq || "0");

    // A failed run's error, its failing attempt and its traceback, from its terminal event
    // (as the server's _failure).
    function showFailure(event) {
      if (event.state.kind !== "ended" || event.state.cause.kind !== "failed") {
        return;
      }
      failure.replaceChildren();
      failure.className = "failure";
      const title = document.createElement("h2");
      title.textContent = "Failure";
      const facts = document.createElement("dl");
      facts.className = "facts";
      for (const [label, id, value] of [
        ["error", "failure-error", describeState(event.state)],
        ["attempt", "failure-attempt",
         "generation " + event.generation + " (event " + event.seq + ", " + formatTime(event.at, true) + ")"],
      ]) {
        const dt = document.createElement("dt");
        dt.textContent = label;
        const dd = document.createElement("dd");
        dd.id = id;
        dd.textContent = value;
        facts.append(dt, dd);
      }
      let shown;
      if (typeof event.detail.traceback === "string" && event.detail.traceback) {
        shown = document.createElement("pre");
        shown.className = "traceback";
        shown.textContent = event.detail.traceback;
      } else {
        shown = document.createElement("p");
        shown.className = "note";
        shown.textContent = "no traceback was stored with this failure";
      }
      shown.id = "traceback";
      failure.append(title, facts, shown);
    }

    // Its times (as the server's _times): set by the events that start and end it.
    const times = document.getElementById("run-times");

    function showTimes(event) {
      if (event && times.dataset.createdAt === "") {
        times.dataset.createdAt = String(event.at);
      }
      if (event && event.state.kind === "running" && times.dataset.startedAt === "") {
        times.dataset.startedAt = String(event.at);
      }
      if (event && event.state.kind === "ended") {
        times.dataset.endedAt = String(event.at);
      }
      document.getElementById("run-created").textContent = timeText(times.dataset.createdAt);
      document.getElementById("run-started").textContent = timeText(times.dataset.startedAt);
      document.getElementById("run-ended").textContent = timeText(times.dataset.endedAt);
      document.getElementById("run-duration").textContent = lasted(times.dataset);
    }

    window.setInterval(function () {
      showTimes(null);
    }, 5000);

    // One entry per state the run went through (as the server's _timeline).
    function addToTimeline(event) {
      const key = timelineKey(event.state);
      const last = timeline.lastElementChild;
      if (last && last.dataset.key === key) {
        return;
      }
      if (!timeline.dataset.start || !last) {
        timeline.dataset.start = String(event.at);
      }
      if (last) {
        last.querySelector(".tl-for").textContent =
          "for " + formatDuration(event.at - Number(last.dataset.at));
      }
      const li = document.createElement("li");
      li.className = stateClasses(event.state);
      li.dataset.at = String(event.at);
      li.dataset.key = key;
      for (const [className, text] of [
        ["tl-at", "+" + formatDuration(event.at - Number(timeline.dataset.start))],
        ["tl-state", describeState(event.state)],
        ["tl-for", ""],
      ]) {
        const span = document.createElement("span");
        span.className = className;
        span.textContent = text;
        li.appendChild(span);
      }
      timeline.appendChild(li);
    }

    // The controls the committed state allows; the others disabled, with why (and when
    // none is, one line saying why in place of them all).
    function showControls(controls, none) {
      const section = document.getElementById("controls");
      section.classList.toggle("none-offered", Boolean(none));
      document.getElementById("no-controls").textContent = none || "";
      for (const form of document.querySelectorAll("form[data-control]")) {
        const why = controls[form.dataset.control] || "";
        form.querySelector("fieldset").disabled = why !== "";
        form.classList.toggle("unavailable", why !== "");
        form.querySelector(".why").textContent = why;
      }
      body.dataset.controlsShown = String(Number(body.dataset.controlsShown || "0") + 1);
    }

    function showTicket(state) {
      ticket.replaceChildren();
      if (state.kind !== "awaiting") {
        ticket.className = "hidden";
        return;
      }
      const t = state.ticket;
      ticket.className = "ticket";
      const title = document.createElement("h2");
      title.textContent = "Live ticket";
      ticket.appendChild(title);
      for (const [label, value] of [
        ["reason", t.reason],
        ["correlation id", t.correlation_id],
        ["deadline", t.deadline === null ? "never" : formatTime(t.deadline, true)],
        ["payload", JSON.stringify(t.payload, null, 2)],
        ["accepts", t.accepts === null ? "any JSON value" : JSON.stringify(t.accepts, null, 2)],
      ]) {
        const h = document.createElement("h3");
        h.textContent = label;
        const pre = document.createElement("pre");
        pre.className = "json";
        pre.textContent = value;
        if (label === "accepts") {
          pre.id = "ticket-accepts";
        }
        ticket.appendChild(h);
        ticket.appendChild(pre);
      }
    }

    function addEvent(event) {
      if (event.seq <= seq) {
        return;
      }
      seq = event.seq;
      const tr = document.createElement("tr");
      const detail = Object.keys(event.detail).length ? JSON.stringify(event.detail) : "";
      const at = formatTime(event.at, false);
      tr.appendChild(cell(String(event.seq)));
      tr.appendChild(cell(String(event.generation)));
      tr.appendChild(cell(event.kind));
      tr.appendChild(cell(shortState(event.state)));
      const code = document.createElement("code");
      code.textContent = detail;
      const td = document.createElement("td");
      td.appendChild(code);
      tr.appendChild(td);
      tr.appendChild(cell(at));
      events.appendChild(tr);
      addToTimeline(event);
      showFailure(event);
      showTimes(event);
    }

    // At most one reload in flight; events that arrive meanwhile cause one more after it
    // (a busy run's events do not each cost two requests).
    let pending = false;
    let again = false;

    async function reload() {
      if (pending) {
        again = true;
        return;
      }
      pending = true;
      try {
        await reloadOnce();
      } finally {
        pending = false;
        if (again) {
          again = false;
          reload();
        }
      }
    }

    async function reloadOnce() {
      const [recordAnswer, eventsAnswer, controlsAnswer] = await Promise.all([
        fetch(apiRun),
        fetch(apiRun + "/events?after=" + seq),
        fetch("/ui/controls/" + encodeURIComponent(runId)),
      ]);
      if (controlsAnswer.ok) {
        const answer = await controlsAnswer.json();
        showControls(answer.controls, answer.none);
      }
      if (recordAnswer.ok) {
        const data = await recordAnswer.json();
        stateText.textContent = describeState(data.state);
        generation.textContent = String(data.generation);
        record.textContent = JSON.stringify(data, null, 2);
        showTicket(data.state);
        body.dataset.state = data.state.kind;
      }
      if (eventsAnswer.ok) {
        for (const event of await eventsAnswer.json()) {
          addEvent(event);
        }
      }
    }

    const findStreams = streamPanels(apiRun);

    connect(
      "/api/stream?run_id=" + encodeURIComponent(runId),
      function (event) {
        addEvent(event);
        if (event.kind === "committed") {
          stateText.textContent = describeState(event.state);
          body.dataset.state = event.state.kind;
          showTicket(event.state);
        }
        reload();
        findStreams();
      },
      function () {
        reload();
        findStreams();
      },
    );

    function show(status, data) {
      result.replaceChildren();
      result.classList.remove("hidden", "ok", "refused");
      const line = document.createElement("strong");
      const text = document.createElement("pre");
      text.className = "json";
      if (status === 200) {
        result.classList.add("ok");
        line.textContent = "committed: " + describeState(data);
      } else if (status === 0) {
        result.classList.add("refused");
        line.textContent = data;
      } else {
        result.classList.add("refused");
        const committed = data.state ? describeState(data.state) : "unknown run";
        line.textContent = "refused (" + status + "): " + data.error + " — " + data.message +
          " [committed state: " + committed + "]";
      }
      result.dataset.status = String(status);
      result.dataset.error = status === 200 || status === 0 ? "" : data.error;
      result.appendChild(line);
      if (status !== 0) {
        // The API's answer as it came, folded: the line above already says what it means.
        const details = document.createElement("details");
        const summary = document.createElement("summary");
        summary.textContent = "the API's answer";
        text.textContent = JSON.stringify(data, null, 2);
        details.appendChild(summary);
        details.appendChild(text);
        result.appendChild(details);
      }
    }

    for (const form of document.querySelectorAll("form[data-control]")) {
      form.addEventListener("submit", async function (submitted) {
        submitted.preventDefault();
        // A control that ends the run is sent only once confirmed.
        if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
          result.replaceChildren();
          result.classList.remove("hidden", "ok", "refused");
          const line = document.createElement("strong");
          line.textContent = "not sent: " + form.dataset.control + " was not confirmed";
          result.appendChild(line);
          result.dataset.status = "unconfirmed";
          result.dataset.error = "";
          return;
        }
        const payload = {};
        for (const field of form.querySelectorAll("input, textarea")) {
          const text = field.value.trim();
          if (text === "" && field.name !== "payload") {
            continue;
          }
          if (field.dataset.json) {
            try {
              payload[field.name] = JSON.parse(text);
            } catch (error) {
              show(0, field.name + " is not valid JSON: " + error.message);
              return;
            }
          } else {
            payload[field.name] = field.value;
          }
        }
        const answer = await fetch(apiRun + "/" + form.dataset.control, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify(payload),
        });
        show(answer.status, await answer.json());
        reload();
      });
    }
  }

  // ---------------------------------------------------------------- a run's streams

  // One panel per channel, each following /api/runs/{id}/streams/{channel} (server-sent
  // events, one chunk each, the offset as its id: a reconnect resumes where it stopped).
  // Text chunks are appended as they are; other values one JSON line each; a reset clears
  // what earlier attempts wrote; the end closes the panel's stream. Returns the function
  // that looks for channels written since.
  function streamPanels(apiRun) {
    const holder = document.getElementById("streams");
    const followed = new Map();

    function panelOf(channel) {
      for (const section of holder.querySelectorAll("section.stream")) {
        if (section.dataset.channel === channel) {
          return section;
        }
      }
      const none = document.getElementById("no-streams");
      if (none) {
        none.remove();
      }
      const section = document.createElement("section");
      section.className = "stream";
      section.dataset.channel = channel;
      const title = document.createElement("h3");
      const name = document.createElement("code");
      name.textContent = channel;
      const status = document.createElement("span");
      status.className = "stream-status";
      title.append(name, " ", status);
      const text = document.createElement("pre");
      text.className = "stream-text";
      section.append(title, text);
      holder.appendChild(section);
      return section;
    }

    function follow(channel) {
      if (followed.has(channel)) {
        return;
      }
      const section = panelOf(channel);
      const text = section.querySelector(".stream-text");
      const status = section.querySelector(".stream-status");
      const url = apiRun + "/streams/" + encodeURIComponent(channel);
      const source = new EventSource(url);
      followed.set(channel, source);
      section.dataset.state = "connecting";
      source.addEventListener("chunk", function (message) {
        const chunk = JSON.parse(message.data);
        section.dataset.offset = String(chunk.offset);
        if (chunk.kind === "data") {
          const value = chunk.value;
          text.append(typeof value === "string" ? value : JSON.stringify(value) + "\n");
          section.dataset.state = "live";
          status.textContent = "attempt " + chunk.generation;
        } else if (chunk.kind === "reset") {
          // A later attempt starts the output over: what earlier ones wrote is dropped.
          text.textContent = "";
          section.dataset.resets = String(Number(section.dataset.resets || "0") + 1);
          status.textContent = "attempt " + chunk.generation + " started over";
        } else if (chunk.kind === "end") {
          section.dataset.state = "ended";
          status.textContent = "ended";
          source.close();
        }
      });
      source.addEventListener("stream_error", function (message) {
        const error = JSON.parse(message.data);
        section.dataset.state = "error";
        status.textContent = error.error + ": " + error.message;
        source.close();
      });
      source.addEventListener("error", function () {
        if (source.readyState === EventSource.CLOSED) {
          // Refused (a gap, a run gone) or ended before it began (204): nothing follows.
          if (section.dataset.state !== "ended" && section.dataset.state !== "error") {
            section.dataset.state = "closed";
            status.textContent = "not streaming";
          }
        } else if (section.dataset.state !== "ended") {
          section.dataset.state = "reconnecting";
          status.textContent = "reconnecting…";
        }
      });
    }

    for (const section of holder.querySelectorAll("section.stream")) {
      follow(section.dataset.channel);
    }

    let looking = false;
    async function findStreams() {
      if (looking) {
        return;
      }
      looking = true;
      try {
        const answer = await fetch(apiRun + "/streams");
        if (answer.ok) {
          for (const channel of await answer.json()) {
            follow(channel);
          }
        }
      } finally {
        looking = false;
      }
    }

    // A stream's writes are not events: while the run may still write, look for new
    // channels now and then too.
    window.setInterval(function () {
      if (body.dataset.state !== "ended" && !document.hidden) {
        findStreams();
      }
    }, 2000);
    return findStreams;
  }

  // ---------------------------------------------------------------- the workers

  // A worker's heartbeats are not events: the page reads /api/workers now and then.
  function workersPage() {
    const tbody = document.getElementById("workers-body");
    const empty = document.getElementById("no-workers");
    const query = body.dataset.query || "";

    // As the server's worker_bodies.
    function bodiesText(bodies) {
      return Object.entries(bodies)
        .map(([name, version]) => (version === null ? name : name + " (" + version + ")"))
        .join(", ");
    }

    function render(workers) {
      const fresh = document.createDocumentFragment();
      for (const worker of workers) {
        const tr = document.createElement("tr");
        tr.dataset.workerId = worker.worker_id;
        tr.appendChild(cell(worker.worker_id));
        const state = document.createElement("span");
        state.className = "worker-state worker-" + worker.state;
        state.textContent = worker.state;
        const stateCell = document.createElement("td");
        stateCell.appendChild(state);
        tr.appendChild(stateCell);
        tr.appendChild(cell(worker.host));
        tr.appendChild(cell(String(worker.pid)));
        tr.appendChild(cell(bodiesText(worker.bodies)));
        tr.appendChild(cell(String(worker.concurrency)));
        tr.appendChild(cell(String(worker.active)));
        tr.appendChild(cell(timeText(worker.started_at)));
        tr.appendChild(cell(timeText(worker.last_seen)));
        fresh.appendChild(tr);
      }
      tbody.replaceChildren(fresh);
      empty.classList.toggle("hidden", workers.length > 0);
      body.dataset.refreshed = String(Number(body.dataset.refreshed || "0") + 1);
    }

    async function reload() {
      try {
        const answer = await fetch("/api/workers?" + query, { headers: { Accept: "application/json" } });
        if (answer.ok) {
          render(await answer.json());
          live.textContent = "live";
          live.className = "live connected";
          body.dataset.live = "connected";
        }
      } catch (error) {
        live.textContent = "reconnecting…";
        live.className = "live";
        body.dataset.live = "reconnecting";
      }
    }

    reload();
    window.setInterval(function () {
      if (!document.hidden) {
        reload();
      }
    }, 2000);
  }

  if (body.dataset.page === "runs") {
    runsPage();
  } else if (body.dataset.page === "run") {
    runPage();
  } else if (body.dataset.page === "workers") {
    workersPage();
  }
})();
