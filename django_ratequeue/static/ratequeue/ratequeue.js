/**
 * The browser client of django-ratequeue's HTTP API (`django_ratequeue.urls`).
 *
 * A dependency-free ES module: no build step, served by Django's static files.
 *
 *     import { enqueue, job, rateLimit } from "/static/ratequeue/ratequeue.js";
 *
 *     const { value } = await rateLimit("llm_tokens").value({ count: 40 });
 *     const { id } = await enqueue("myapp.jobs.summarise", { args: [42] });
 *     const stop = job(id).subscribe((event) => console.log(event.type, event.data));
 *     const summary = await job(id).result();   // rejects with a JobError if the job fails
 *
 * Requests go to the same origin with the session cookie and Django's CSRF token (from the
 * `csrftoken` cookie, else from a `csrfmiddlewaretoken` field on the page, or as
 * configured). `configure({ baseUrl })` points the module-level functions elsewhere;
 * `new Client({...})` makes an independent client.
 *
 * @module ratequeue
 */

/**
 * @typedef {"scheduled" | "waiting" | "running" | "retrying" | "failed" | "complete" | "canceled"} JobStatus
 */

/**
 * A job as `GET jobs/<id>/` describes it.
 * @typedef {object} JobInfo
 * @property {string} id
 * @property {string} function the job's registered name
 * @property {JobStatus} status
 * @property {number} attempts
 * @property {Record<string, unknown> | null} progress the latest `report_progress(...)` value
 * @property {unknown} [result] the return value, once complete
 * @property {unknown} [error] the last error, once failed
 * @property {{index: number, text: string}[]} [output] the output chunks after `since`
 *   (`GET jobs/<id>/?since=n`), in order
 * @property {boolean} [more_output] whether there are more chunks than `output` holds
 * @property {JobEta} [eta] when it will start
 */

/**
 * When a job will start, as the server estimates it (docs/eta.md).
 * @typedef {object} JobEta
 * @property {number|null} position the unstarted jobs ahead of it in its queue and key
 *   (null: not shown, as it would count other owners' jobs; docs/eta.md)
 * @property {boolean|null} position_capped whether there are `position` or more
 * @property {string | null} earliest_start the earliest its limits allow (ISO 8601)
 * @property {string | null} estimated_start when it will likely start (ISO 8601), null
 *   when there is no estimate (a paused queue, no run time measured yet)
 * @property {"reservation" | "schedule" | "retry" | "rate_limit" | "throughput" | "paused" | "unknown" | "no_worker" | "running" | "finished"} basis
 *   how it was estimated
 * @property {string} [note] what holds it up, in words ("no running worker knows
 *   `app.jobs.new_job`"), or ""
 */

/**
 * One event of a job, from its Server-Sent Events stream or, when polling, made up from
 * `GET jobs/<id>/` so that a subscriber cannot tell the difference.
 * @typedef {object} JobEvent
 * @property {"status" | "eta" | "progress" | "output" | "result" | "error"} type
 * @property {any} data `status`: {status, ...}; `eta`: a {@link JobEta}, sent while the
 *   job has not started, when it moved materially; `progress`: the progress object;
 *   `output`: {index, text}; `result`: {result}; `error`: {status, error}
 */

/**
 * What `GET ratelimits/<name>/` answers for the current user.
 * @typedef {object} RateLimitValue
 * @property {number} value tokens available now (negative while tokens are reserved ahead)
 * @property {number} capacity
 * @property {number} rate tokens added per period
 * @property {number} period seconds
 * @property {string | null} retry_at when `count` tokens will be available (ISO 8601),
 *   null if they are now
 */

/**
 * @typedef {object} ClientConfig
 * @property {string} [baseUrl] where `django_ratequeue.urls` is included; default "/ratequeue/"
 * @property {string | (() => string | null | undefined) | null} [csrfToken] a CSRF token, or a
 *   function that returns one; by default the `csrftoken` cookie, else a
 *   `csrfmiddlewaretoken` field on the page
 * @property {string} [csrfCookieName] default "csrftoken" (Django's CSRF_COOKIE_NAME)
 * @property {string} [csrfHeaderName] default "X-CSRFToken" (Django's CSRF_HEADER_NAME)
 * @property {RequestCredentials} [credentials] default "same-origin"; "include" for an API
 *   on another origin that allows it
 * @property {Record<string, string>} [headers] sent with every request, e.g.
 *   `{Authorization: "Token ..."}` (EventSource cannot send headers: such a client polls)
 * @property {number} [pollInterval] milliseconds between polls when not streaming; default 1000
 * @property {number} [maxStreamErrors] connection errors in a row after which a
 *   subscription polls instead of streaming; default 3
 */

/**
 * @typedef {object} SubscribeOptions
 * @property {"auto" | "poll"} [transport] "auto" (the default) streams with EventSource,
 *   and polls when there is none, the stream is refused or it keeps failing; "poll" polls
 * @property {(error: RateQueueError) => void} [onError] called when the job cannot be
 *   followed at all (e.g. 404: no such job, or not yours); the subscription then ends
 */

const DEFAULTS = Object.freeze({
  baseUrl: "/ratequeue/",
  csrfToken: null,
  csrfCookieName: "csrftoken",
  csrfHeaderName: "X-CSRFToken",
  credentials: /** @type {RequestCredentials} */ ("same-origin"),
  headers: {},
  pollInterval: 1000,
  maxStreamErrors: 3,
});

const EVENT_TYPES = ["status", "eta", "progress", "output", "result", "error"];
// The statuses of jobs that have not started: those whose start is estimated.
const UNSTARTED_STATUSES = new Set(["waiting", "scheduled", "retrying"]);
const FINAL_EVENTS = new Set(["result", "error"]);
const FINAL_STATUSES = new Set(["complete", "failed", "canceled"]);
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** A request the server refused or could not answer: `status` is the HTTP status (0 when
 * the server was not reached), `body` the parsed answer, `retryAfter` seconds (a 429's
 * `Retry-After`) or null. */
export class RateQueueError extends Error {
  /**
   * @param {string} message
   * @param {{status: number, body?: unknown, retryAfter?: number | null}} details
   */
  constructor(message, { status, body = null, retryAfter = null }) {
    super(message);
    this.name = "RateQueueError";
    this.status = status;
    this.body = body;
    this.retryAfter = retryAfter;
  }
}

/** A job that ended without a result: `status` is "failed" or "canceled", `error` what the
 * server reported (the job's last error). */
export class JobError extends Error {
  /**
   * @param {string} jobId
   * @param {{status?: string, error?: unknown}} data the job's `error` event
   */
  constructor(jobId, data) {
    const status = data.status ?? "failed";
    const error = data.error ?? null;
    super(`job ${jobId} ${status}${error ? `: ${describe(error)}` : ""}`);
    this.name = "JobError";
    this.jobId = jobId;
    this.status = status;
    this.error = error;
  }
}

export class Client {
  /** @param {ClientConfig} [config] */
  constructor(config = {}) {
    /** @type {Required<ClientConfig>} */
    this.config = { ...DEFAULTS };
    this.configure(config);
  }

  /** Change some settings; the others keep their values.
   * @param {ClientConfig} config */
  configure(config) {
    Object.assign(this.config, config);
  }

  /**
   * Enqueue a job: `func` is the name of a function marked `@job(expose=True)`.
   * @param {string} func
   * @param {{args?: unknown[], kwargs?: Record<string, unknown>, options?: Record<string, unknown>}} [call]
   * @returns {Promise<JobInfo>} the new job (201)
   */
  enqueue(func, { args = [], kwargs = {}, options = {} } = {}) {
    return this.request("POST", "jobs/", { function: func, args, kwargs, options });
  }

  /**
   * Enqueue one job per item, all or none: each item is `{args, kwargs}`. With
   * `batch: true` the jobs make a new batch: each job's `batch` is its id (`batch(id)`).
   * @param {string} func
   * @param {{args?: unknown[], kwargs?: Record<string, unknown>}[]} items
   * @param {{options?: Record<string, unknown>, batch?: boolean}} [common] options for every job
   * @returns {Promise<JobInfo[]>}
   */
  enqueueMany(func, items, { options = {}, batch = false } = {}) {
    const calls = items.map(({ args = [], kwargs = {} }) => ({ args, kwargs }));
    const body = { function: func, items: calls, options };
    return this.request("POST", "jobs/bulk/", batch ? { ...body, batch: true } : body);
  }

  /** A batch by id (one of yours: another user's batch is 404).
   * @param {string} id */
  batch(id) {
    return new BatchRef(this, id);
  }

  /** A job by id (one of yours: another user's job is 404).
   * @param {string} id */
  job(id) {
    return new JobRef(this, id);
  }

  /** A rate limit configured `"public": True`, as it stands for the current user.
   * @param {string} name */
  rateLimit(name) {
    const client = this;
    return {
      /**
       * @param {{count?: number}} [query] how many tokens you would ask for: `retry_at` is
       *   when they will be there
       * @returns {Promise<RateLimitValue>}
       */
      value({ count } = {}) {
        const query = count === undefined ? "" : `?count=${encodeURIComponent(count)}`;
        return client.request("GET", `ratelimits/${encodeURIComponent(name)}/${query}`);
      },
    };
  }

  /** The absolute URL of an API path.
   * @param {string} path */
  url(path) {
    return new URL(path, new URL(this.config.baseUrl, document.baseURI)).href;
  }

  /**
   * One JSON request; resolves with the parsed answer, rejects with a RateQueueError.
   * @param {string} method
   * @param {string} path relative to baseUrl
   * @param {unknown} [body] sent as JSON
   * @returns {Promise<any>}
   */
  async request(method, path, body) {
    const url = this.url(path);
    /** @type {Record<string, string>} */
    const headers = { Accept: "application/json", ...this.config.headers };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (!SAFE_METHODS.has(method)) {
      const token = this.csrfToken();
      if (token) headers[this.config.csrfHeaderName] = token;
    }
    let response;
    let answer;
    try {
      response = await fetch(url, {
        method,
        headers,
        credentials: this.config.credentials,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      answer = await readBody(response);
    } catch (error) {
      const reason = `the server was not reached, or stopped answering (${describe(error)})`;
      throw new RateQueueError(`${method} ${url}: ${reason}`, { status: 0 });
    }
    if (!response.ok) {
      const retryAfter = parseRetryAfter(response.headers.get("Retry-After"));
      let message = `${method} ${url}: ${response.status} ${response.statusText}`;
      const reason = serverMessage(answer);
      if (reason) message += `: ${reason}`;
      if (retryAfter !== null) message += ` (retry after ${retryAfter} s)`;
      throw new RateQueueError(message, { status: response.status, body: answer, retryAfter });
    }
    return answer;
  }

  /** The CSRF token to send: configured, else the cookie, else a form field on the page. */
  csrfToken() {
    const configured = this.config.csrfToken;
    if (typeof configured === "function") return configured() ?? null;
    if (configured) return configured;
    return (
      readCookie(this.config.csrfCookieName) ??
      document.querySelector("input[name=csrfmiddlewaretoken]")?.getAttribute("value") ??
      null
    );
  }
}

/** One job, by id. */
export class JobRef {
  /**
   * @param {Client} client
   * @param {string} id
   */
  constructor(client, id) {
    this.client = client;
    this.id = id;
  }

  get path() {
    return `jobs/${encodeURIComponent(this.id)}/`;
  }

  /**
   * The job, with the output chunks numbered above `since` (a bounded number of them:
   * `more_output` says when there are more).
   * @param {{since?: number}} [query]
   * @returns {Promise<JobInfo>}
   */
  get({ since = 0 } = {}) {
    return this.client.request("GET", since ? `${this.path}?since=${since}` : this.path);
  }

  /**
   * When the job will start: its place, the earliest start, an estimate and its basis.
   * @returns {Promise<JobEta | undefined>}
   */
  async eta() {
    return (await this.get()).eta;
  }

  /**
   * Seconds until `eta`'s estimated start (0 once it is due), or null without an estimate:
   * call it every second for a countdown.
   * @param {JobEta | undefined} eta
   * @param {number} [now] milliseconds since the epoch
   * @returns {number | null}
   */
  static secondsToStart(eta, now = Date.now()) {
    if (!eta?.estimated_start) return null;
    return Math.max(0, (Date.parse(eta.estimated_start) - now) / 1000);
  }

  /** Ask for the job to be canceled (a running job stops when its attempt ends).
   * @returns {Promise<JobInfo>} */
  cancel() {
    return this.client.request("POST", `${this.path}cancel/`);
  }

  /**
   * The job's return value, once it has one: rejects with a JobError when the job fails or
   * is canceled, with a RateQueueError when it cannot be followed (e.g. 404), and with
   * `signal.reason` when `signal` aborts (e.g. `AbortSignal.timeout(30_000)`).
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<any>}
   */
  result({ signal } = {}) {
    return new Promise((resolve, reject) => {
      signal?.throwIfAborted();
      const unsubscribe = this.subscribe(
        (event) => {
          if (event.type === "result") resolve(event.data.result);
          if (event.type === "error") reject(new JobError(this.id, event.data));
        },
        { onError: reject },
      );
      signal?.addEventListener("abort", () => {
        unsubscribe();
        reject(signal.reason);
      });
    });
  }

  /**
   * Follow the job: `onEvent` gets its status changes, progress, output chunks (in order,
   * each once) and finally a `result` or `error` event, after which the subscription ends.
   * Streams with EventSource (which resumes by itself after a dropped connection); polls
   * `GET jobs/<id>/` when EventSource is missing, the stream is refused, or it fails
   * `maxStreamErrors` times in a row; polling delivers the same events, the output chunks
   * a poll at a time.
   * @param {(event: JobEvent) => void} onEvent
   * @param {SubscribeOptions} [options]
   * @returns {() => void} unsubscribe
   */
  subscribe(onEvent, { transport = "auto", onError } = {}) {
    return new Subscription(this, onEvent, onError ?? (() => {})).start(transport);
  }
}

/** One subscriber's view of one job: the stream, or the polling that replaces it. */
class Subscription {
  /**
   * @param {JobRef} job
   * @param {(event: JobEvent) => void} onEvent
   * @param {(error: RateQueueError) => void} onError
   */
  constructor(job, onEvent, onError) {
    this.job = job;
    this.onEvent = onEvent;
    this.onError = onError;
    this.stopped = false;
    /** @type {EventSource | null} */
    this.source = null;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
    // What the subscriber has seen, so that polling repeats nothing.
    this.lastStatus = null;
    this.lastProgress = "null";
    // The number of the last output chunk delivered: a poll asks for those after it.
    this.lastOutput = 0;
    /** @type {JobEta | null} the last estimate delivered */
    this.lastEta = null;
  }

  /** @param {"auto" | "poll"} transport */
  start(transport) {
    if (transport === "auto" && typeof EventSource === "function") {
      this.stream();
    } else {
      this.poll();
    }
    return () => this.stop();
  }

  stop() {
    this.stopped = true;
    this.source?.close();
    this.source = null;
    clearTimeout(this.timer);
  }

  /** @param {JobEvent} event */
  deliver(event) {
    if (this.stopped) return;
    if (event.type === "status") {
      this.lastStatus = event.data.status;
    } else if (event.type === "progress") {
      this.lastProgress = JSON.stringify(event.data);
    } else if (event.type === "output") {
      this.lastOutput = event.data.index;
    } else if (event.type === "eta") {
      this.lastEta = event.data;
    }
    if (FINAL_EVENTS.has(event.type)) this.stop();
    this.onEvent(event);
  }

  /** Whether a polled status or progress is the one the subscriber has already.
   * @param {JobEvent} event */
  repeats(event) {
    if (event.type === "status") return event.data.status === this.lastStatus;
    if (event.type === "progress") return JSON.stringify(event.data) === this.lastProgress;
    if (event.type === "output") return event.data.index <= this.lastOutput;
    if (event.type === "eta") return !etaMoved(this.lastEta, event.data);
    return false;
  }

  /** @param {RateQueueError} error */
  fail(error) {
    if (this.stopped) return;
    this.stop();
    this.onError(error);
  }

  /** Follow the job's Server-Sent Events; poll when they fail. */
  stream() {
    const { config } = this.job.client;
    const url = this.job.client.url(`${this.job.path}events/`);
    const source = new EventSource(url, { withCredentials: config.credentials === "include" });
    this.source = source;
    // Failed connections in a row: a stream that opens (a reconnection after the server
    // ended a long stream, for one) is not failing.
    let errors = 0;
    source.addEventListener("open", () => {
      errors = 0;
    });
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (event) => {
        // The server's `error` event has data; a connection error is a plain Event.
        if (!(event instanceof MessageEvent)) return;
        this.deliver({ type: /** @type {JobEvent["type"]} */ (type), data: JSON.parse(event.data) });
      });
    }
    source.addEventListener("error", (event) => {
      if (event instanceof MessageEvent || this.stopped) return;
      errors += 1;
      // CLOSED: the server refused the stream (e.g. 404 or 401) and EventSource gave up;
      // else it is reconnecting by itself.
      if (source.readyState !== EventSource.CLOSED && errors < config.maxStreamErrors) return;
      source.close();
      this.source = null;
      this.poll(); // which reports a refusal that polling gets too (onError)
    });
  }

  /** Ask for the job now and every `pollInterval` ms, and report what changed. */
  async poll() {
    const { pollInterval } = this.job.client.config;
    let delay = pollInterval;
    while (!this.stopped) {
      /** @type {JobInfo | null} */
      let info = null;
      try {
        info = await this.job.get({ since: this.lastOutput });
        // More output than one answer holds: ask for the rest at once.
        delay = info?.more_output ? 0 : pollInterval;
      } catch (error) {
        if (!(error instanceof RateQueueError)) throw error;
        // A 4xx other than 429 will not get better: no such job, not yours, logged out.
        if (error.status >= 400 && error.status < 500 && error.status !== 429) {
          this.fail(error);
          return;
        }
        // The server away or busy: back off, up to 30 s, or as long as it asks.
        delay = Math.max((error.retryAfter ?? 0) * 1000, Math.min(delay * 2, 30_000));
      }
      for (const event of info ? eventsOf(info) : []) {
        if (!this.repeats(event)) this.deliver(event);
      }
      if (this.stopped) return;
      await new Promise((resolve) => {
        this.timer = setTimeout(resolve, delay);
      });
    }
  }
}

/**
 * The events a poll of `GET jobs/<id>/?since=n` stands for, in the order a stream sends
 * them (the subscription drops those it has delivered already). A final status waits
 * until the last of the output has been delivered.
 * @param {JobInfo} info
 * @returns {JobEvent[]}
 */
function eventsOf(info) {
  /** @type {JobEvent} */
  const status = { type: "status", data: { status: info.status, attempts: info.attempts } };
  const final = FINAL_STATUSES.has(info.status);
  /** @type {JobEvent[]} */
  const events = final ? [] : [status];
  if (info.eta && UNSTARTED_STATUSES.has(info.status)) events.push({ type: "eta", data: info.eta });
  for (const chunk of info.output ?? []) events.push({ type: "output", data: chunk });
  if (info.progress != null) events.push({ type: "progress", data: info.progress });
  if (!final || info.more_output) return events;
  events.push(status);
  if (info.status === "complete") {
    events.push({ type: "result", data: { result: info.result } });
  } else {
    events.push({ type: "error", data: { status: info.status, error: info.error } });
  }
  return events;
}

/**
 * Whether `after` tells a subscriber who has `before` something new, as the server's
 * streams judge it: another position or basis, an estimate that came or went, or one that
 * moved by more than a second and a tenth of the wait it had left.
 * @param {JobEta | null} before
 * @param {JobEta} after
 */
function etaMoved(before, after) {
  if (!before) return true;
  if (before.position !== after.position || before.basis !== after.basis) return true;
  if (!before.estimated_start || !after.estimated_start) {
    return !before.estimated_start !== !after.estimated_start;
  }
  const now = Date.now();
  const was = Math.max(Date.parse(before.estimated_start), now);
  const is = Math.max(Date.parse(after.estimated_start), now);
  return Math.abs(is - was) > Math.max(1000, 0.1 * (was - now));
}

/** @param {Response} response */
async function readBody(response) {
  const text = await response.text();
  if (!text) return null;
  if ((response.headers.get("Content-Type") ?? "").includes("json")) {
    try {
      return JSON.parse(text);
    } catch {
      // fall through: show the text
    }
  }
  return text;
}

/**
 * The server's reason, from DRF's `{"detail": ...}` or field errors `{"args": [...]}`.
 * @param {unknown} body
 */
function serverMessage(body) {
  if (body == null) return "";
  if (typeof body === "string") return body.length > 200 ? `${body.slice(0, 200)}…` : body;
  if (typeof body !== "object") return String(body);
  if ("detail" in body) return describe(body.detail);
  return Object.entries(body)
    .map(([field, problem]) => `${field}: ${describe(problem)}`)
    .join("; ");
}

/**
 * @param {unknown} value
 * @returns {string}
 */
function describe(value) {
  if (value instanceof Error) return value.message;
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return value.map(describe).join(" ");
  return JSON.stringify(value);
}

/** @param {string | null} header seconds, or an HTTP date */
function parseRetryAfter(header) {
  if (!header) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return seconds;
  const date = Date.parse(header);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

/** @param {string} name */
function readCookie(name) {
  for (const pair of document.cookie ? document.cookie.split("; ") : []) {
    const at = pair.indexOf("=");
    if (pair.slice(0, at) === name) return decodeURIComponent(pair.slice(at + 1));
  }
  return null;
}

/** The client behind the module-level functions. */
/**
 * A batch as `GET batches/<id>/` describes it.
 * @typedef {object} BatchInfo
 * @property {string} id
 * @property {"open" | "sealed" | "finished"} state
 * @property {Record<JobStatus, number>} counts its jobs by status
 * @property {{done: number, total: number}} progress jobs ended, of all its jobs
 * @property {BatchOutcome | null} outcome once finished
 */

/**
 * What a finished batch's callback receives: its jobs' ids by how they ended.
 * @typedef {object} BatchOutcome
 * @property {string} batch_id
 * @property {number} total
 * @property {string[]} succeeded
 * @property {string[]} failed
 * @property {string[]} canceled
 * @property {unknown} context
 */

/** One batch, by id. */
export class BatchRef {
  /**
   * @param {Client} client
   * @param {string} id
   */
  constructor(client, id) {
    this.client = client;
    this.id = id;
  }

  get path() {
    return `batches/${encodeURIComponent(this.id)}/`;
  }

  /** @returns {Promise<BatchInfo>} */
  get() {
    return this.client.request("GET", this.path);
  }

  /** Ask for every job of the batch to be canceled.
   * @returns {Promise<BatchInfo>} */
  cancel() {
    return this.client.request("POST", `${this.path}cancel/`);
  }

  /**
   * Follow the batch: `onProgress({done, total, counts})` as its jobs end, then
   * `onFinished(outcome)`, after which the subscription ends. Streams with EventSource
   * (`GET batches/<id>/events/`); polls `GET batches/<id>/` without it or when it fails.
   * @param {{onProgress?: (progress: {done: number, total: number, counts?: Record<string, number>}) => void,
   *   onFinished?: (outcome: BatchOutcome) => void, onError?: (error: RateQueueError) => void,
   *   transport?: "auto" | "poll"}} handlers
   * @returns {() => void} unsubscribe
   */
  subscribe({ onProgress = () => {}, onFinished = () => {}, onError = () => {}, transport = "auto" }) {
    let stopped = false;
    /** @type {EventSource | null} */
    let source = null;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    let last = "";
    const stop = () => {
      stopped = true;
      source?.close();
      clearTimeout(timer);
    };
    /** @param {{done: number, total: number}} progress */
    const progressed = (progress) => {
      const seen = JSON.stringify(progress);
      if (!stopped && seen !== last) onProgress(progress);
      last = seen;
    };
    /** @param {BatchOutcome} outcome */
    const finished = (outcome) => {
      if (stopped) return;
      stop();
      onFinished(outcome);
    };
    const poll = async () => {
      while (!stopped) {
        try {
          const info = await this.get();
          progressed({ ...info.progress, counts: info.counts });
          if (info.outcome) finished(info.outcome);
        } catch (error) {
          if (!(error instanceof RateQueueError)) throw error;
          if (error.status >= 400 && error.status < 500 && error.status !== 429) {
            stop();
            onError(error);
            return;
          }
        }
        await new Promise((resolve) => {
          timer = setTimeout(resolve, this.client.config.pollInterval);
        });
      }
    };
    if (transport === "auto" && typeof EventSource === "function") {
      const { config } = this.client;
      source = new EventSource(this.client.url(`${this.path}events/`), {
        withCredentials: config.credentials === "include",
      });
      source.addEventListener("progress", (event) => progressed(JSON.parse(event.data)));
      source.addEventListener("finished", (event) => finished(JSON.parse(event.data)));
      source.addEventListener("error", () => {
        if (stopped || source?.readyState !== EventSource.CLOSED) return;
        source = null;
        poll(); // which reports a refusal that polling gets too (onError)
      });
    } else {
      poll();
    }
    return stop;
  }

  /**
   * The batch's outcome once every job has ended; rejects with a RateQueueError when it
   * cannot be followed, with `signal.reason` when `signal` aborts.
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<BatchOutcome>}
   */
  result({ signal } = {}) {
    return new Promise((resolve, reject) => {
      signal?.throwIfAborted();
      const stop = this.subscribe({ onFinished: resolve, onError: reject });
      signal?.addEventListener("abort", () => {
        stop();
        reject(signal.reason);
      });
    });
  }
}

export const client = new Client();

/** @param {ClientConfig} config */
export const configure = (config) => client.configure(config);
/** @type {Client["enqueue"]} */
export const enqueue = (func, call) => client.enqueue(func, call);
/** @type {Client["enqueueMany"]} */
export const enqueueMany = (func, items, common) => client.enqueueMany(func, items, common);
/** @type {Client["job"]} */
export const job = (id) => client.job(id);
/** @type {Client["rateLimit"]} */
export const rateLimit = (name) => client.rateLimit(name);
/** @param {string} id */
export const batch = (id) => client.batch(id);
