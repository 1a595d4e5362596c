//! Every bound pen enforces, named once with its default and, where configurable, its range.
//!
//! Nothing else in the crate writes a literal limit: tools receive a `&Limits` and read it.

use std::time::Duration;

use thiserror::Error;

/// Bounds on a single integer setting: the default and the inclusive range a user may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub name: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

impl Bounds {
    /// Checks a user-supplied value, naming the setting and its range when it is out of bounds.
    pub fn check(&self, value: u64) -> Result<u64, LimitError> {
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(LimitError::OutOfRange {
                name: self.name,
                value,
                min: self.min,
                max: self.max,
            })
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LimitError {
    #[error("{name} = {value} is out of range: it must be between {min} and {max}")]
    OutOfRange {
        name: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}

/// `max_tool_result_bytes`: the largest observation stored in a transcript (SPEC §3).
/// The floor and ceiling stop a typo from switching the cap off or making every page an error.
pub const MAX_TOOL_RESULT_BYTES: Bounds = Bounds {
    name: "max_tool_result_bytes",
    default: 65_536,
    min: 1_024,
    max: 1_048_576,
};

/// `checkpoint_store_bytes`: the file contents (pre-images, SPEC §13) one session's checkpoint
/// store may hold, each distinct content counted once. A write whose pre-image would pass it is
/// still made, but its file is "not revertible: too large", and the approval request says so
/// before the write. Default 64 MiB, range 1 MiB–1 GiB.
pub const CHECKPOINT_STORE_BYTES: Bounds = Bounds {
    name: "checkpoint_store_bytes",
    default: 64 * 1024 * 1024,
    min: 1024 * 1024,
    max: 1024 * 1024 * 1024,
};

/// The longest diff of one conflicting file a revert reports (SPEC §13): 16 KiB.
pub const MAX_REVERT_DIFF_BYTES: usize = 16 * 1024;
/// `instruction_bytes`: the budget of the project's instruction files (AGENTS.md and the others
/// `instruction_files` names) across a session's whole chain, as codex's 32 KiB; a file past it
/// is cut with a note. The floor keeps a short file whole; the ceiling keeps the system part
/// well inside any window pen plans for.
pub const INSTRUCTION_BYTES: Bounds = Bounds {
    name: "instruction_bytes",
    default: 32_768,
    min: 1_024,
    max: 262_144,
};

/// `instruction_files`: at most this many names, each at most [`MAX_INSTRUCTION_NAME_BYTES`].
pub const MAX_INSTRUCTION_FILES: usize = 16;

/// The longest name (a path relative to a folder) `instruction_files` may list.
pub const MAX_INSTRUCTION_NAME_BYTES: usize = 256;

/// The most paths the environment block lists from `git status` (the counts cover all).
pub const MAX_GIT_STATUS_PATHS: usize = 20;

/// How long a `git` child of the environment block may run before it is killed and the block
/// goes without it.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(3);

/// The most bytes of `git` output the environment block reads.
pub const MAX_GIT_OUTPUT_BYTES: usize = 65_536;

/// The editor's focus (active file, selection, visible ranges, `pen run --file`) added to one
/// prompt: at most this many bytes, cut with a note.
pub const MAX_FOCUS_BYTES: usize = 16_384;

/// The most of a file pen reads to find where a client's text (an ACP embedded resource) lies
/// in it, to judge it in place: 8 MiB. Text it does not find there is judged alone.
pub const MAX_PLACED_TEXT_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The most visible ranges and `--file` attachments one prompt's focus names.
pub const MAX_FOCUS_RANGES: usize = 16;

/// `context_window_tokens`: the model's context window, for the prompt budget. Unset by
/// default: pen asks the server or its table of hosted models (`providers::window`), and only
/// when neither knows the model plans under `default`, a window most current models have (and
/// says so once), rather than the 128,000 that overflowed small local servers.
pub const CONTEXT_WINDOW_TOKENS: Bounds = Bounds {
    name: "context_window_tokens",
    default: 32_768,
    min: 512,
    max: 10_000_000,
};

/// `max_output_tokens`: the most tokens one answer may take, reserved out of the window.
pub const MAX_OUTPUT_TOKENS: Bounds = Bounds {
    name: "max_output_tokens",
    default: 4_096,
    min: 16,
    max: 1_000_000,
};

/// `reasoning_budget_tokens`: Anthropic's and Bedrock's extended-thinking budget. 0 (the
/// default) is off; any other value must lie in this range. The floor is Anthropic's documented
/// minimum `budget_tokens`; the budget must also be below `max_output_tokens`, which the
/// provider checks before sending (thinking tokens count against the output limit).
pub const REASONING_BUDGET_TOKENS: Bounds = Bounds {
    name: "reasoning_budget_tokens",
    default: 0,
    min: 1_024,
    max: 1_000_000,
};

/// `budget_margin_tokens`: input tokens kept free below `context_window_tokens −
/// max_output_tokens`, for the estimate's error (SPEC §6). 2% of the default window.
pub const BUDGET_MARGIN_TOKENS: Bounds = Bounds {
    name: "budget_margin_tokens",
    default: 2_560,
    min: 0,
    max: 1_000_000,
};

/// `budget_policy`: which prompt-budget policy plans requests (SPEC §6): 3 (compacts as little
/// as each request needs) or 4 (compacts in one step down to a low-water mark, so the requests
/// between two compactions extend each other and a provider's prefix cache keeps hitting).
pub const BUDGET_POLICY: Bounds = Bounds {
    name: "budget_policy",
    default: 4,
    min: 3,
    max: 4,
};

/// `compaction_low_water_percent`: under policy 4, how far a compaction brings the request down:
/// this share of the way from the smallest request the policy can make (the fixed parts, the
/// prompt, the latest two groups, the note) to the input budget. The default, 20, was chosen by
/// cost (`cargo bench --bench cache -- sweep`, issue 25): on every workload and window the cost
/// of the same work falls as the mark goes down, under both price shapes (cache read 0.1 and
/// write 1.25; cached 0.25 and no write premium) — at 128k the 75-file workload costs 0.201×
/// policy 3 at 20% against 0.233× at 50% (0.405× against 0.470× cached), 200 files 0.134×
/// against 0.165× — because a deeper compaction leaves more room before the next one. The
/// floor keeps a fifth of that room for what a compaction keeps of the turn's older calls (their
/// excerpts); the ceiling keeps a margin below the budget, or every request would compact again.
pub const COMPACTION_LOW_WATER_PERCENT: Bounds = Bounds {
    name: "compaction_low_water_percent",
    default: 20,
    min: 20,
    max: 90,
};

/// `request_timeout_secs`: the longest one provider request may take.
pub const REQUEST_TIMEOUT_SECS: Bounds = Bounds {
    name: "request_timeout_secs",
    default: 300,
    min: 1,
    max: 3_600,
};

/// `max_attempts`: tries of one provider request on 429, 5xx and dropped connections.
pub const MAX_ATTEMPTS: Bounds = Bounds {
    name: "max_attempts",
    default: 4,
    min: 1,
    max: 10,
};

/// `max_turn_requests`: provider requests in one turn before it ends `max_turn_requests`.
pub const MAX_TURN_REQUESTS: Bounds = Bounds {
    name: "max_turn_requests",
    default: 50,
    min: 1,
    max: 1_000,
};

/// The limits of pen_search (SPEC §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchLimits {
    /// Directory entries the walk may visit. Default 10,000.
    pub max_entries: usize,
    /// Files whose contents are searched. Default 1,000.
    pub max_files: usize,
    /// Bytes read from searched files, in total. Default 16 MiB.
    pub max_bytes: u64,
    /// Directory depth below the search root. Default 32.
    pub max_depth: usize,
    /// Matches returned. Default 100.
    pub max_matches: usize,
    /// Bytes of a line shown around a match. Default 200.
    pub excerpt_bytes: usize,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits {
            max_entries: 10_000,
            max_files: 1_000,
            max_bytes: 16 * 1024 * 1024,
            max_depth: 32,
            max_matches: 100,
            excerpt_bytes: 200,
        }
    }
}

/// All limits of the native tools. Built once from configuration and passed by reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The cap on one serialized tool result; see [`MAX_TOOL_RESULT_BYTES`].
    pub max_tool_result_bytes: usize,
    /// Lines in one pen_read or pen_tail page, and the default `line_count`. Default 200.
    pub max_page_lines: usize,
    /// Raw bytes in one page before escaping. Default 32 KiB.
    pub max_page_bytes: usize,
    /// The smallest page worth returning; below it a tool fails naming the cap. Default 320 bytes,
    /// enough for one directory entry with a 255-byte name.
    pub min_page_bytes: usize,
    /// Entries in one pen_list page, and the default `limit`. Default 200.
    pub max_list_entries: usize,
    /// Files in one pen_find page. Default 200.
    pub max_find_results: usize,
    /// How far pen_read and pen_tail look back for a private-key armor line. Default 128 KiB,
    /// longer than any PEM private key (a FrodoKEM-1344 key is about 57 KB).
    pub key_lookback_bytes: usize,
    /// The serialized arguments of one pen_create or pen_edit. Default 64 KiB.
    pub max_write_argument_bytes: usize,
    /// The largest file pen_edit rewrites, and the largest whose content hash is computed for
    /// the stale-write guard (larger files get a size-and-mtime stamp). Default 16 MiB.
    pub max_edit_file_bytes: u64,
    /// The unified diff returned by pen_edit. Default 8 KiB.
    pub max_diff_bytes: usize,
    /// The bytes at the start of a file inspected for a NUL to call it binary. Default 8 KiB.
    pub binary_sniff_bytes: usize,
    /// The most escaped bytes the variable part of a read, tail, list, search or command result
    /// may take, from the prompt budget ([`Limits::fitted_to_room`]); unbounded by default.
    pub fitted_page_bytes: usize,
    pub search: SearchLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tool_result_bytes: MAX_TOOL_RESULT_BYTES.default as usize,
            max_page_lines: 200,
            max_page_bytes: 32 * 1024,
            min_page_bytes: 320,
            max_list_entries: 200,
            max_find_results: 200,
            key_lookback_bytes: 128 * 1024,
            max_write_argument_bytes: 64 * 1024,
            max_edit_file_bytes: 16 * 1024 * 1024,
            max_diff_bytes: 8 * 1024,
            binary_sniff_bytes: 8 * 1024,
            fitted_page_bytes: usize::MAX,
            search: SearchLimits::default(),
        }
    }
}

impl Limits {
    /// The default limits with a checked `max_tool_result_bytes`.
    pub fn with_max_tool_result_bytes(value: u64) -> Result<Limits, LimitError> {
        let max = MAX_TOOL_RESULT_BYTES.check(value)?;
        Ok(Limits {
            max_tool_result_bytes: max as usize,
            ..Limits::default()
        })
    }

    /// These limits with pages sized for the information a prompt budget holds (SPEC §3).
    /// `room_tokens` is what the budget leaves after the parts every request of the turn sends
    /// before its messages: the system prompt with the project's instructions, and the tool
    /// schemas. The budget must hold the latest two tool groups whole (every plan sends them
    /// whole, and two full pages may be their results) and a page after them (the next result,
    /// which arrives before the older of the two can be excerpted): so a page is at most a
    /// [`PAGES_THE_BUDGET_HOLDS`]th of the room, at [`ESTIMATED_BYTES_PER_TOKEN`]. The third
    /// page is also the slack for the prompt, the calls and their framing, and a tokenizer that
    /// counts more than the estimate. Never less than [`MIN_FITTED_PAGE_BYTES`].
    ///
    /// At a 16k window this is 8 to 11 KB, so a typical source file (2–6 KB) is one page; from
    /// about 40k up it is more than the cap's half and 200 lines, and changes nothing.
    pub fn fitted_to_room(mut self, room_tokens: u64) -> Limits {
        let page = room_tokens.saturating_mul(ESTIMATED_BYTES_PER_TOKEN) / PAGES_THE_BUDGET_HOLDS;
        self.fitted_page_bytes = usize::try_from(page)
            .unwrap_or(usize::MAX)
            .max(MIN_FITTED_PAGE_BYTES);
        self
    }
}

/// How many pages a prompt budget holds besides its fixed parts ([`Limits::fitted_to_room`]):
/// the latest two groups' results, which every plan sends whole, and the next one: 3.
pub const PAGES_THE_BUDGET_HOLDS: u64 = 3;

/// The bytes of a page's escaped (ASCII) text per estimated token: the token estimate counts an
/// ASCII byte a quarter of a token (`budget::estimate`): 4.
pub const ESTIMATED_BYTES_PER_TOKEN: u64 = 4;

/// The smallest page [`Limits::fitted_to_room`] sets, whatever the window: 1 KiB, about 25
/// lines of code (above the 320-byte minimum page, so the fit alone never fails a tool).
pub const MIN_FITTED_PAGE_BYTES: usize = 1024;

/// pen_list: the escaped bytes of a cut name's prefix kept in its `PREFIX/HASH` cursor, used
/// when the full name does not fit the page to be repeated as the cursor: 64.
pub const LIST_CURSOR_PREFIX_BYTES: usize = 64;

/// pen_list: the folders whose sorted listing is kept for their next pages (per process), least
/// recently used forgotten first: 8.
pub const LIST_SNAPSHOT_FOLDERS: usize = 8;

/// pen_list: the memory all kept listings may take together, 16 MiB; a folder whose listing
/// alone takes more (about 500,000 entries of 16-byte names) pages by listing it again. A
/// listing costs its names' bytes and 24 bytes an entry.
pub const LIST_SNAPSHOT_BYTES: usize = 16 * 1024 * 1024;

/// pen_list: how long a kept listing outlives its last page, 5 minutes: long enough for a model
/// paging through a folder a round trip at a time, short enough not to hold memory for a folder
/// nobody pages any more.
pub const LIST_SNAPSHOT_IDLE: Duration = Duration::from_secs(5 * 60);

/// The file versions whose content hash and line marks pen keeps in memory (per process),
/// least recently used forgotten first: 256. An entry is a hash and at most
/// [`LINE_INDEX_MAX_MARKS`] counts, so the cache stays under 9 MiB.
pub const FILE_VERSION_CACHE_ENTRIES: usize = 256;

/// How much older than the moment pen starts reading a file its modification and change times
/// must be before what pen learns of that version is cached: 3 s, more than the coarsest
/// timestamp tick of a common file system (FAT's 2 s). A write within the tick pen saw could
/// otherwise leave the file changed under the same timestamps. The same holds for a folder's
/// listing that pen_list keeps.
pub const FILE_VERSION_SETTLE: Duration = Duration::from_secs(3);

/// Bytes between two line marks of a file (the newline count before each), so a line number
/// at any offset costs less than one stride of scanning: 64 KiB.
pub const LINE_INDEX_STRIDE: u64 = 64 * 1024;

/// The most line marks kept for one file: 4,096 (a wider stride for files over 256 MiB).
pub const LINE_INDEX_MAX_MARKS: u64 = 4_096;

/// pen_plan: the most steps a plan holds: 50, more than a task broken into steps needs and
/// few enough that the whole list goes to the editors with every update.
pub const MAX_PLAN_STEPS: usize = 50;

/// pen_plan: the most bytes of one step's text: 300, a sentence or two; a step is a line of a
/// checklist, not a document.
pub const MAX_PLAN_STEP_BYTES: usize = 300;

/// pen_plan is offered to the model only when its context window holds at least 8,192 tokens:
/// under a 4,096-token window the whole catalog of the other tools leaves about 23 tokens of
/// room, and a plan is worth keeping only when the window has room for more than one step of
/// work anyway. A call made without the tool offered (an older session) still runs.
pub const PLAN_TOOL_MIN_WINDOW_TOKENS: u64 = 8_192;

/// Sessions in one `SessionStore::list_sessions` page; a larger `limit` is lowered to it.
pub const MAX_SESSION_PAGE: usize = 200;

/// Entries in one `SessionStore::transcript` page; a larger `limit` is lowered to it.
pub const MAX_TRANSCRIPT_PAGE_ENTRIES: usize = 500;

/// The head a tool result is cut to in every later request after the provider rejected one as
/// over the context window (2 KiB): the newest group of large results shrinks once per
/// rejection, so a retry fits without re-running any tool.
pub const SHRUNK_HEAD_BYTES: usize = 2 * 1024;

/// Sessions whose history the turn engine keeps in memory between turns (default 16): a turn
/// in one of them reads only what was appended since; any other reads its session once.
pub const MAX_CACHED_HISTORIES: usize = 16;

/// Payload bytes in one transcript page, 4 MiB: the page ends before the entry that would pass
/// it, so 500 entries near the 1 MiB result ceiling do not make one 500 MiB reply. An entry larger
/// than this still comes back, alone on its page.
pub const MAX_TRANSCRIPT_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// How long one SQLite call waits for another connection (another daemon) to release the
/// database before it reports it busy: 5 s.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times the session store retries an operation that SQLite still reported busy or
/// locked after the busy timeout (or at once, where SQLite does not wait): 4.
pub const SQLITE_BUSY_RETRIES: u32 = 4;

/// The pause before retry `n` of a busy operation is `n` times this: 25 ms, 50 ms, 75 ms…
pub const SQLITE_BUSY_BACKOFF: Duration = Duration::from_millis(25);

/// How often a process running a turn renews its session lease (the heartbeat): 2 s.
pub const SESSION_LEASE_HEARTBEAT: Duration = Duration::from_secs(2);

/// A session lease whose heartbeat is older than this is expired even when a process with its
/// pid is alive (a recycled pid, a process frozen for that long): 30 s, fifteen missed
/// heartbeats, so a busy machine never expires a live turn's lease.
pub const SESSION_LEASE_EXPIRY: Duration = Duration::from_secs(30);

/// The most directories the disk watcher watches (one inotify watch each); past it, changes in
/// the rest go unnoticed until a read or edit looks at the file itself.
pub const MAX_WATCHED_DIRS: usize = 4_096;

/// How long disk events are gathered before they are reported as one batch.
pub const WATCH_DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Symlinks one path resolution follows before it fails, as the kernel's own `MAXSYMLINKS`
/// (40): enough for any real layout, and a loop of links ends instead of spinning.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Names tried for a write's temp file before the write fails: a name is random, so a clash is
/// already unlikely, and a few retries make a failure mean something is wrong.
pub const TEMP_NAME_ATTEMPTS: usize = 16;

/// How long a model provider may stay silent before a request fails with a timeout: while
/// connecting, waiting for the answer to start, or between two pieces of a streamed answer. It
/// bounds silence rather than the whole answer, because a long answer legitimately streams for
/// minutes. Default 300 s.
pub const PROVIDER_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// How many times one provider request is sent at most, the first attempt included, when the
/// provider answers 429, 5xx, drops the connection or times out. Default 4.
pub const PROVIDER_MAX_ATTEMPTS: u32 = 4;

/// The backoff before the first provider retry: 500 ms, doubled for each later retry up to
/// [`PROVIDER_RETRY_MAX_DELAY`], of which a random half is taken off (jitter) so that clients
/// rejected together do not return together.
pub const PROVIDER_RETRY_BASE_DELAY: Duration = Duration::from_millis(500);

/// The longest backoff between two provider attempts: 30 s.
pub const PROVIDER_RETRY_MAX_DELAY: Duration = Duration::from_secs(30);

/// The longest wait a provider's `Retry-After` can impose before a retry: 60 s. A longer request
/// is cut to this, so one header cannot stall a turn for an hour; Stop ends the wait at once.
pub const PROVIDER_RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// The models an error names when the server does not have the configured one: 20 of those its
/// model list reports (then how many more), so a server with hundreds does not flood the line.
pub const MAX_HINT_MODELS: usize = 20;

/// Bytes of a provider's error body that are read: 64 KiB. An error envelope is a few hundred
/// bytes; a proxy's HTML page can be far larger and says nothing more.
pub const PROVIDER_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Bytes of a provider's error wording kept in a `ProviderError` message: 1,000, cut on a
/// character boundary.
pub const PROVIDER_ERROR_MESSAGE_BYTES: usize = 1_000;

/// Prompt budget (SPEC §6): each string argument of an excerpted tool call is cut to this many
/// bytes, enough to name a path or a search pattern.
pub const EXCERPT_ARGUMENT_BYTES: usize = 200;

/// Prompt budget: the head of an excerpted tool result, enough for a denial or an error message.
pub const EXCERPT_RESULT_BYTES: usize = 500;

/// Prompt budget: the range a calibration ratio (reported ÷ estimated prompt tokens) is clamped
/// to, so one odd usage report cannot make the budget useless.
pub const TOKEN_RATIO_MIN: f64 = 0.5;
pub const TOKEN_RATIO_MAX: f64 = 4.0;

// Bounds on commands, the protocol, listings and configuration (issue 11, items 7, 10, 11).

/// How long pen_command keeps reading a killed command's pipes for output already written:
/// 500 ms. A process that escaped the process group can hold a pipe open for ever, so the
/// readers take what arrives in this time and stop.
pub const COMMAND_DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the body of a `pen serve` message may stall, while what has come of it is a whole
/// JSON value, before that is taken as the whole message: 1 s. Only a `Content-Length` too
/// long for its body makes pen wait for bytes after a complete value.
pub const FRAME_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest session title, 200 bytes: longer ones (from `pen/newSession`, a prompt, or a
/// database written before this bound) are cut on a character boundary.
pub const MAX_SESSION_TITLE_BYTES: usize = 200;

/// The most characters of a call's arguments shown as its subject when its tool names no
/// command, query or path (an MCP tool's): 300, then `…`. The model sees them whole.
pub const MAX_SUBJECT_ARGUMENTS_CHARS: usize = 300;

/// The ids and titles in one `pen/listSessions` page, 64 KiB (as JSON counts them): the page ends
/// before the session that would pass it. 200 sessions with the longest titles come to less
/// than twice that, so only titles of control characters make a page shorter than its limit.
pub const MAX_SESSION_PAGE_BYTES: usize = 64 * 1024;

/// The `model` config key's longest value, 256 bytes: model ids are tens of bytes (a Bedrock
/// inference-profile ARN about 100), and the value is sent on every provider request.
pub const MAX_MODEL_BYTES: usize = 256;

/// The `base_url` config key's longest value, 2,048 bytes, the URL length every HTTP stack takes.
pub const MAX_BASE_URL_BYTES: usize = 2_048;

/// The `api_key_env` config key's longest value, 256 bytes: it names an environment variable.
pub const MAX_API_KEY_ENV_BYTES: usize = 256;

/// The largest config file read, 1 MiB; a config is a few hundred bytes.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// How much of a refused config value an error message shows: 100 bytes.
pub const MAX_CONFIG_SHOWN_VALUE_BYTES: usize = 100;

// Bounds of the transport, pen_command, pen_read and pen_search that lived in their modules
// (issue 13, item 7).

/// The largest JSON-RPC message the transport reads, 256 MiB. A larger one is skipped unread
/// and answered with an error: far above any real edit (a whole large file in `didOpen`), and
/// low enough that a hostile `Content-Length` cannot make pen allocate without bound.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// The longest header line the transport accepts, 8 KiB; a longer one is not a header.
/// `Content-Length: N` and `Content-Type: …` take a few dozen bytes.
pub const MAX_HEADER_LINE_BYTES: usize = 8 * 1024;

/// Bytes the transport reads from stdin at a time, 64 KiB: a pipe's default capacity.
pub const TRANSPORT_READ_CHUNK_BYTES: usize = 64 * 1024;

/// How much of a bad header line a transport error message quotes, 80 bytes: enough to
/// recognise it, small enough that the error stays one short line.
pub const FRAME_EXCERPT_BYTES: usize = 80;

/// How long the transport waits, once stdin closes, for the answers already queued to be
/// written, 2 s; requests still running are abandoned with the client.
pub const TRANSPORT_WRITER_DRAIN: Duration = Duration::from_secs(2);

/// pen_command's timeout when the model names none, 120 s: long enough for a typical build or
/// test run.
pub const COMMAND_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest timeout the model may give pen_command, 1,800 s (30 minutes); a longer
/// `timeout_secs` is lowered to it.
pub const COMMAND_MAX_TIMEOUT: Duration = Duration::from_secs(1_800);

/// Bytes pen_command reads from a command's stdout or stderr at a time, 8 KiB.
pub const COMMAND_READ_CHUNK_BYTES: usize = 8 * 1024;

/// How far past a refused page pen_read looks for the END of the key, to tell the model where it
/// may resume, 256 KiB: longer than any armored key.
pub const KEY_END_LOOKAHEAD: u64 = 256 * 1024;

/// pen_search hands files to its readers in batches of this many, 16: one hand-over per batch
/// instead of per file keeps thread wake-ups off the hot path, and a small batch keeps small the
/// reading done for nothing after an early stop.
pub const SEARCH_BATCH_FILES: usize = 16;

/// Batches pen_search queues for its readers ahead of the in-order merge, 4: enough to keep
/// every reader busy while the walk lists a large folder.
pub const SEARCH_READ_AHEAD_BATCHES: usize = 4;

/// pen_search's walk runs on a thread of its own and hands entries to the in-order merge in
/// batches of this many, 64: one hand-over per batch keeps thread wake-ups off the hot path.
pub const SEARCH_WALK_BATCH_ENTRIES: usize = 64;

/// Batches of entries the walk thread takes ahead of the merge, 4: with the batch in each
/// thread's hands, at most 384 entries are taken past where a page stops. They are not walked
/// for nothing: the page's kept walk yields them first.
pub const SEARCH_WALK_AHEAD_BATCHES: usize = 4;

/// Walks pen_search keeps, one per cursor it handed out, so that the page resuming at that
/// cursor continues the walk where the last page left it instead of listing again every folder
/// before the cursor, 8: a few searches paged side by side. Each holds the listings of the open
/// folders on its path (at most one per level) and the entries taken past its cursor.
pub const SEARCH_KEPT_WALKS: usize = 8;

/// How long a kept walk waits for the page that resumes it, 10 minutes: longer than a model's
/// turn between two pages; a later page walks afresh from its cursor.
pub const SEARCH_KEPT_WALK_TTL: Duration = Duration::from_secs(600);

/// File versions whose verdict pen_search keeps (binary, not UTF-8, holding a private key, or
/// text), 65,536, about 5 MiB: a later search of an unchanged file skips checking its bytes
/// again. When full, the verdicts are forgotten and learnt anew.
pub const SEARCH_VERDICT_CACHE_ENTRIES: usize = 65_536;

/// Ignore files (`.gitignore`, `.ignore`, `.git/info/exclude`) pen_search keeps compiled, by
/// path and version, 4,096: more than a large monorepo holds (the cargo registry's 13,000 files
/// hold 124). When full, they are forgotten and compiled anew.
pub const SEARCH_IGNORE_CACHE_FILES: usize = 4_096;

/// The most of one ignore file (`.gitignore`, `.ignore`, `.git/info/exclude`) pen_search reads;
/// the lines after it, and a line it cuts, are left out. Far above any real one.
pub const SEARCH_IGNORE_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Folders pen_search knows to hold no ignore file and no `.git`, by version, 32,768 (about
/// 5 MiB at most): a later search of an unchanged folder looks its three ignore files up with
/// one `stat` of the folder instead of three. When full, they are forgotten and learnt anew.
pub const SEARCH_IGNORE_CACHE_FOLDERS: usize = 32_768;

// End of the issue 13, item 7 block.

// Bounds of `pen acp` (issue 17).

/// The longest line `pen acp` reads from its client, 64 MiB: one JSON-RPC message, which may
/// carry a whole file from `fs/read_text_file`. A longer line is skipped unread, answered with
/// a parse error, and the connection keeps serving.
pub const MAX_ACP_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The largest user prompt `session/prompt` assembles from its content blocks (text, resource
/// links, embedded text resources), 1 MiB: a prompt beyond it is refused with an error that
/// says so, rather than cut silently; the prompt budget plans the rest of the request.
pub const MAX_ACP_PROMPT_BYTES: usize = 1024 * 1024;

/// The largest prompt `pen run` reads from stdin (`pen run -`, or a pipe), 1 MiB, as for
/// `session/prompt`: a longer one is refused with an error that says so, never cut silently.
pub const MAX_STDIN_PROMPT_BYTES: usize = 1024 * 1024;

/// The most bytes of a folder's latest-session record that are read (`pen run --continue`),
/// 8 KiB: a session id and a path; anything larger is not pen's record.
pub const MAX_LATEST_RECORD_BYTES: u64 = 8 * 1024;

/// How often `pen run`'s live line on a terminal redraws the time the model (or a command) has
/// been silent: every second.
pub const LIVE_LINE_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// How long pen waits for the client to answer `fs/read_text_file` or `fs/write_text_file`,
/// 30 s: an editor answers in milliseconds; a client that never answers must not hang a turn.
/// A read that times out falls back to the disk; a write that times out fails the edit.
pub const ACP_CLIENT_FS_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest file pen asks the client for with `fs/read_text_file`, 8 MiB on disk: a larger
/// one (a log, a data file) is read from the disk, so its text never crosses the pipe as one
/// JSON line; an editor rarely holds such a file with unsaved changes.
pub const MAX_ACP_CLIENT_READ_BYTES: u64 = 8 * 1024 * 1024;

/// The largest file whose whole old and new text a `diff` content block of a `tool_call_update`
/// carries, 1 MiB; a larger edit is reported by the unified diff of the result, as text.
pub const MAX_ACP_DIFF_BYTES: usize = 1024 * 1024;

/// How much of a tool result a `tool_call_update` (and a replayed one in `session/load`)
/// shows the client, 4 KiB: the head of a read or search, for display; the model reads the
/// whole result.
pub const ACP_RESULT_EXCERPT_BYTES: usize = 4 * 1024;

// End of the issue 17 block.

// Issue 14 item 2 (prompt-cache breakpoints).

/// Cache breakpoints one request may carry, 4: the most Anthropic's Messages API accepts
/// (`cache_control` on at most four blocks) and Bedrock's Converse (`cachePoint` blocks),
/// https://platform.claude.com/docs/en/build-with-claude/prompt-caching.
pub const PROMPT_CACHE_BREAKPOINTS_MAX: usize = 4;

// End of the issue 14 item 2 block.
// MCP client (issue 16): the bounds on `[mcp_servers.NAME]`, on what a server may hand pen, and
// on how long pen waits for one.

/// MCP servers one configuration may name (config.toml, the editor's settings and a project's
/// `.mcp.json` together), 32.
pub const MAX_MCP_SERVERS: usize = 32;

/// Bytes of an MCP server's name, 32: its tools are named `mcp__<server>__<tool>` in at most
/// [`MAX_MCP_TOOL_NAME_BYTES`], so a long server name would leave no room for the tool's.
pub const MAX_MCP_SERVER_NAME_BYTES: usize = 32;

/// Bytes of a tool name as the model sees it (`mcp__<server>__<tool>`), 64: the most every
/// provider accepts.
pub const MAX_MCP_TOOL_NAME_BYTES: usize = 64;

/// Arguments of a stdio server's command, 64.
pub const MAX_MCP_ARGS: usize = 64;

/// Environment variables, headers or tool names in one server's configuration, 64 each.
pub const MAX_MCP_ENTRIES: usize = 64;

/// Bytes of one command, argument, environment value, header, URL or path of a server's
/// configuration, 4 KiB.
pub const MAX_MCP_VALUE_BYTES: usize = 4 * 1024;

/// Bytes of an MCP tool's description as the model is given it, 2 KiB (cut with a note).
pub const MAX_MCP_DESCRIPTION_BYTES: usize = 2 * 1024;

/// Bytes of an MCP tool's input schema, 16 KiB: a larger one is left out with a logged reason.
pub const MAX_MCP_SCHEMA_BYTES: usize = 16 * 1024;

/// Tools pen takes from one server, 128: the rest are left out with a logged reason.
pub const MAX_MCP_TOOLS_PER_SERVER: usize = 128;

/// Bytes of one day's log file, 8 MiB: past it the file is moved aside (replacing the one moved
/// before) and a new one started, so a flood of log lines cannot fill the disk.
pub const MAX_LOG_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Days of log files kept, 7 (the oldest are deleted when a day begins).
pub const LOG_DAYS_KEPT: usize = 7;

/// Log lines waiting for the log's writer thread, 8,192: past it lines are dropped rather than
/// held in memory.
pub const LOG_BUFFERED_LINES: usize = 8_192;

/// Bytes of one message from an MCP server, 16 MiB (rmcp's own bound on a line of a stdio
/// server and on an event of an HTTP one): a stdio server's longer message is skipped as it
/// streams by and the calls waiting on the server fail at once as too large.
pub const MAX_MCP_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Bytes the relay of a stdio server's stdout reads at a time and buffers towards rmcp, 64 KiB.
pub const MCP_RELAY_BUFFER_BYTES: usize = 64 * 1024;

/// How long a stdio server has to exit once pen closed its stdin, 3 s; then it is killed.
pub const MCP_EXIT_GRACE_SECS: u64 = 3;

/// Pages of one `tools/list`, 16: a server that keeps answering with a next cursor is not
/// followed further (the tools listed so far are taken, the rest left out, logged).
pub const MAX_MCP_TOOL_LIST_PAGES: usize = 16;

/// The last lines of a server's stderr kept to say why it is down, 20…
pub const MCP_STDERR_TAIL_LINES: usize = 20;

/// …and at most 2 KiB of them.
pub const MCP_STDERR_TAIL_BYTES: usize = 2 * 1024;

/// The first wait before a failed server is started again, 1 s; it doubles with each failure
/// in a row, up to [`MCP_RESTART_BACKOFF_MAX_SECS`].
pub const MCP_RESTART_BACKOFF_SECS: u64 = 1;

/// The longest wait before a failed server is started again, 60 s.
pub const MCP_RESTART_BACKOFF_MAX_SECS: u64 = 60;

/// Bytes of the text kept of one embedded resource in a result, 8 KiB (the whole result is
/// capped too).
pub const MAX_MCP_RESOURCE_TEXT_BYTES: usize = 8 * 1024;

/// Bytes of a project's `.mcp.json`, 256 KiB.
pub const MAX_MCP_JSON_BYTES: u64 = 256 * 1024;

/// `startup_timeout_secs` of an MCP server: how long pen waits for it to start and list its
/// tools.
pub const MCP_STARTUP_TIMEOUT_SECS: Bounds = Bounds {
    name: "startup_timeout_secs",
    default: 30,
    min: 1,
    max: 600,
};

/// `tool_timeout_secs` of an MCP server: how long one call may take.
pub const MCP_TOOL_TIMEOUT_SECS: Bounds = Bounds {
    name: "tool_timeout_secs",
    default: 120,
    min: 1,
    max: 3_600,
};

/// How long each context-window discovery request (llama.cpp `/props`, Ollama `/api/show`,
/// vLLM and LM Studio model lists) may take: a server that does not answer in time is taken to
/// know nothing, and the turn goes on with the next source.
pub const WINDOW_DISCOVERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The largest discovery answer read (a model list of a big vLLM or LM Studio install is a few
/// KiB; more is not a model list).
pub const MAX_DISCOVERY_BODY_BYTES: usize = 1 << 20;

/// Native Ollama's `options.num_ctx` is rounded up to a multiple of this, so consecutive
/// requests of a session ask for the same window and Ollama keeps the loaded model and its KV
/// cache instead of reloading it for every few tokens of growth.
pub const OLLAMA_NUM_CTX_STEP: u64 = 2_048;

/// The window Ollama gives a model through its OpenAI-compatible endpoint, which ignores
/// `num_ctx`: its documented default below 24 GiB of VRAM. pen plans under it when it finds
/// Ollama behind `provider = "openai"` (the native `provider = "ollama"` sets num_ctx itself).
pub const OLLAMA_COMPAT_WINDOW_TOKENS: u64 = 4_096;

/// For a window pen found (not one the user set), the share of it the output reserve may take
/// at most (1/4) and the share the safety margin may take at most (1/32): the defaults of
/// `max_output_tokens` and `budget_margin_tokens` suit a 128k window and would leave nothing of
/// a 2k or 4k local window.
pub const FOUND_WINDOW_OUTPUT_DIVISOR: u64 = 4;
pub const FOUND_WINDOW_MARGIN_DIVISOR: u64 = 32;

/// Calibration ignores a report of fewer prompt tokens than the request's bytes ÷ this: no
/// tokenizer packs 8 bytes of text a token, so such a report counts only part of the prompt
/// (the tokens evaluated after a cache hit, a template that dropped the tools) or a truncation.
pub const MIN_BYTES_PER_REPORTED_TOKEN_DIVISOR: u64 = 8;

/// The longest line of a streamed NDJSON answer (native Ollama) pen buffers: one line is one
/// piece of the answer, a few KiB at most; a longer one is a server gone wrong.
pub const MAX_NDJSON_LINE_BYTES: usize = 16 << 20;

// Bounds that lived in their modules (issue 27 item 5); `tests/suite/repo.rs` keeps new ones
// from being defined anywhere else.

/// Sessions in a `pen/listSessions` page when the client names no `limit`: 50.
pub const DEFAULT_SESSION_PAGE: usize = 50;

/// Entries in a `pen/getTranscript` page when the client names no `limit`: 200.
pub const DEFAULT_TRANSCRIPT_PAGE: usize = 200;

/// Rows the export commands (`pen sessions`, `pen export`) fetch per store call: 200.
pub const EXPORT_PAGE_ROWS: usize = 200;

/// Bytes the daemon's stdin thread reads at a time, 64 KiB: a pipe's default capacity.
pub const STDIN_THREAD_CHUNK_BYTES: usize = 64 * 1024;

/// Chunks the stdin thread reads ahead of the transport (and writes queued ahead of the stdout
/// thread), 4: a few, so a client that floods pen is held back by the pipe, not by pen's memory.
pub const STDIO_QUEUED_CHUNKS: usize = 4;

/// The largest Bedrock event-stream message accepted, 16 MiB: AWS caps event-stream messages
/// there, so a longer length means the bytes are not event-stream framing, and buffering
/// towards it would only waste memory.
pub const MAX_BEDROCK_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How long the probe of a local Ollama (for a user with no provider configured) may take
/// before pen decides there is none: 500 ms.
pub const OLLAMA_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The latest `fs/read_text_file` answers `pen acp` keeps for the edits planned on them, 16: an
/// edit re-reads its file just before it writes, so only the newest read of each file is needed.
pub const ACP_KEPT_CLIENT_READS: usize = 16;

/// The nearest lines pen_edit shows when an `old_text` is not found: 3.
pub const EDIT_CANDIDATE_LINES: usize = 3;

/// The distinct lines an ambiguous pen_edit match's error lists occurrences on: 5.
pub const EDIT_OCCURRENCES_SHOWN: usize = 5;

/// Bytes of a file line quoted in a pen_edit error message, 160: enough to recognise a line of
/// code.
pub const EDIT_QUOTED_LINE_BYTES: usize = 160;

/// Lines of unchanged context around each change of an edit's or a revert's diff, 3, as
/// `diff -u` shows them.
pub const DIFF_CONTEXT_LINES: usize = 3;

/// How long the diff algorithm may look for a minimal diff, 1 s. A `replace_all` over a large
/// file can make Myers' algorithm quadratic; past the deadline `similar` returns a coarser but
/// still correct diff, and the diff is only a report of an edit that is already computed.
pub const DIFF_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest a `pen/test/*` hook (served only under `PEN_TEST_HOOKS`) waits for an event: 20 s.
pub const TEST_HOOK_WAIT: Duration = Duration::from_secs(20);

// End of the issue 27 item 5 block.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_bounds_are_checked_and_named() {
        assert_eq!(MAX_TOOL_RESULT_BYTES.check(1_024), Ok(1_024));
        assert_eq!(MAX_TOOL_RESULT_BYTES.check(1_048_576), Ok(1_048_576));
        let err = MAX_TOOL_RESULT_BYTES.check(1_023).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_tool_result_bytes = 1023 is out of range: it must be between 1024 and 1048576"
        );
        assert!(Limits::with_max_tool_result_bytes(1_048_577).is_err());
    }
}
