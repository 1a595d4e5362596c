//! The tool registry: every tool the model may call, with what the rest of pen must know of it
//! (its kind, what a call works on, does it need the owner's approval, may it run beside other
//! calls, can its writes be reverted, how does it run, does its approval show a diff) and its
//! catalog entry, built from the configured [`Limits`].
//!
//! Architecture invariant: a tool's name and facts are declared here once, and what a call
//! works on ([`Subject`]) by a function in the tool's own file. Nothing else matches tool
//! names: the turn engine, the front ends (ACP's kinds, titles and locations), checkpoints,
//! the CLI, the daemon and the config ask a [`ToolSpec`] (or [`kind_of`] and [`subject_of`],
//! which answer for a tool pen does not know too). A read-only tool never needs approval, by
//! construction ([`Effect`]).
//!
//! The native tools are a static table ([`native`], [`get`]). A turn's tools are these, then
//! its MCP servers' tools, each called through the one [`super::Tool`] seam.

use super::subject::Subject;
use super::{
    CatalogEntry, ErrorCode, ToolContext, ToolDoc, ToolError, command, find, list, parse_arguments,
    plan, read, search, tail, write,
};
use crate::limits::Limits;
use futures::future::BoxFuture;
use serde_json::Value;
use std::borrow::Cow;
use tokio_util::sync::CancellationToken;

/// What a call of a tool may do to the world, which decides its approval and parallel safety.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Only reads: runs without approval, and may run concurrently with the other read-only
    /// calls of one answer.
    ReadOnly,
    /// Changes files or runs a program: asks the owner first (unless `auto_approve` or an
    /// "allow for session" covers it), and runs alone.
    NeedsApproval,
}

/// What a tool does, as people are shown it (pen's own; ACP's `ToolKind` is mapped from it at
/// the ACP edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads a file.
    Read,
    /// Writes a file.
    Edit,
    /// Looks through the workspace (a search, a listing).
    Search,
    /// Runs a program.
    Execute,
    /// Anything else (an MCP tool).
    Other,
}

/// What a call may write, which decides whether reverting its turn undoes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// Nothing: a read-only tool.
    Nothing,
    /// Files, each recorded before it is written (through the call's `WriteRecorder`), so a
    /// revert restores them.
    Recorded,
    /// Whatever it does, unrecorded (a command, an MCP tool): a revert cannot undo it and says
    /// so.
    Unrecorded,
}

/// How a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// A synchronous call to completion; a turn runs it on a blocking thread.
    Blocking,
    /// An async call that may run for a long time and stops when its cancel token fires
    /// (pen_command): a turn awaits [`ToolSpec::run`] with its token.
    Cancellable,
}

/// What the owner is shown beside the arguments when asked to approve a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preview {
    /// The arguments alone.
    Arguments,
    /// The unified diff of the planned edit (pen_edit): the engine plans the edit, shows the
    /// plan's diff and applies that same plan once approved.
    Diff,
}

/// A blocking tool: its JSON arguments and the call's context in, its result out.
type BlockingRun = fn(&Value, &ToolContext) -> Result<Value, ToolError>;

/// A cancellable tool: like [`BlockingRun`], but async and stopped by the token.
type CancellableRun = for<'a> fn(
    &'a Value,
    &'a ToolContext<'a>,
    &'a CancellationToken,
) -> BoxFuture<'a, Result<Value, ToolError>>;

/// The code that runs a tool.
#[derive(Clone, Copy)]
enum Run {
    Blocking(BlockingRun),
    Cancellable(CancellableRun),
}

/// One tool as the registry knows it.
pub struct ToolSpec {
    name: Cow<'static, str>,
    kind: ToolKind,
    effect: Effect,
    writes: Writes,
    preview: Preview,
    /// What a call works on, from its arguments (read loosely: they may not be what the tool
    /// takes).
    subject: fn(&Value) -> Subject,
    /// The description and schema the model is given, built from the limits they name.
    describe: fn(&Limits) -> ToolDoc,
    run: Run,
    /// A successful call sets the session's plan to the steps of its arguments
    /// ([`plan::steps`]): the turn records and shows them (pen_plan).
    sets_plan: bool,
    /// The smallest context window the tool is offered under (0: every window); see
    /// [`ToolSpec::offered_under`].
    min_window_tokens: u64,
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("effect", &self.effect)
            .field("writes", &self.writes)
            .field("preview", &self.preview)
            .field("execution", &self.execution())
            .field("sets_plan", &self.sets_plan)
            .field("min_window_tokens", &self.min_window_tokens)
            .finish_non_exhaustive()
    }
}

impl ToolSpec {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> ToolKind {
        self.kind
    }

    /// What a call with `arguments` works on.
    pub fn subject(&self, arguments: &Value) -> Subject {
        (self.subject)(arguments)
    }

    pub fn writes(&self) -> Writes {
        self.writes
    }

    /// Whether reverting a call's turn undoes what it did (it wrote nothing, or recorded each
    /// write first).
    pub fn revertible(&self) -> bool {
        self.writes != Writes::Unrecorded
    }

    /// Whether a call asks the owner first (before `auto_approve` and session grants).
    pub fn needs_approval(&self) -> bool {
        self.effect == Effect::NeedsApproval
    }

    /// Whether a call only reads, so that it may run concurrently with other read-only calls.
    pub fn read_only(&self) -> bool {
        self.effect == Effect::ReadOnly
    }

    pub fn execution(&self) -> Execution {
        match self.run {
            Run::Blocking(_) => Execution::Blocking,
            Run::Cancellable(_) => Execution::Cancellable,
        }
    }

    pub fn preview(&self) -> Preview {
        self.preview
    }

    /// Whether a successful call sets the session's plan (to [`plan::steps`] of its arguments).
    pub fn sets_plan(&self) -> bool {
        self.sets_plan
    }

    /// Whether the catalog offers the tool to a model whose context window is `window_tokens`:
    /// a tool that is only worth its schema with room to spare is left out of a small window
    /// (pen_plan, [`crate::limits::PLAN_TOOL_MIN_WINDOW_TOKENS`]). A call of it still runs.
    pub fn offered_under(&self, window_tokens: u64) -> bool {
        window_tokens >= self.min_window_tokens
    }

    /// The catalog entry the model is given: name, description and JSON Schema for `limits`.
    pub fn describe(&self, limits: &Limits) -> CatalogEntry {
        let ToolDoc {
            description,
            input_schema,
        } = (self.describe)(limits);
        CatalogEntry {
            name: self.name.to_string(),
            description,
            input_schema,
        }
    }

    /// Runs the tool to completion on this thread. A cancellable tool runs uncancelled, on the
    /// current runtime or on one of its own: this is for synchronous callers (`pen tool`,
    /// `pen/callTool` on a blocking thread); a turn awaits [`ToolSpec::run`] instead.
    pub fn call(&self, arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        match self.run {
            Run::Blocking(run) => run(arguments, ctx),
            Run::Cancellable(run) => {
                let never = CancellationToken::new();
                let future = run(arguments, ctx, &never);
                match tokio::runtime::Handle::try_current() {
                    Ok(handle) => handle.block_on(future),
                    Err(_) => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            ToolError::new(ErrorCode::Io, format!("cannot start a runtime: {e}"))
                        })?
                        .block_on(future),
                }
            }
        }
    }

    /// Runs the tool, stopping when `cancel` fires. A blocking tool runs inside the future and
    /// holds its thread: call it through [`ToolSpec::call`] on a blocking thread instead.
    pub fn run<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        match self.run {
            Run::Cancellable(run) => run(arguments, ctx, cancel),
            Run::Blocking(run) => Box::pin(async move { run(arguments, ctx) }),
        }
    }
}

/// The native tools, in the order the model sees them.
static NATIVE: [ToolSpec; 9] = [
    ToolSpec {
        name: Cow::Borrowed("pen_search"),
        kind: ToolKind::Search,
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: search::subject,
        describe: search::spec,
        run: Run::Blocking(run_search),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_list"),
        kind: ToolKind::Search,
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: list::subject,
        describe: list::spec,
        run: Run::Blocking(run_list),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_find"),
        kind: ToolKind::Search,
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: find::subject,
        describe: find::spec,
        run: Run::Blocking(run_find),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_read"),
        kind: ToolKind::Read,
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: read::subject,
        describe: read::spec,
        run: Run::Blocking(run_read),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_tail"),
        kind: ToolKind::Read,
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: tail::subject,
        describe: tail::spec,
        run: Run::Blocking(run_tail),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_create"),
        kind: ToolKind::Edit,
        effect: Effect::NeedsApproval,
        writes: Writes::Recorded,
        preview: Preview::Arguments,
        subject: write::create_subject,
        describe: write::create_spec,
        run: Run::Blocking(run_create),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_edit"),
        kind: ToolKind::Edit,
        effect: Effect::NeedsApproval,
        writes: Writes::Recorded,
        preview: Preview::Diff,
        subject: write::edit_subject,
        describe: write::edit_spec,
        run: Run::Blocking(run_edit),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_command"),
        kind: ToolKind::Execute,
        effect: Effect::NeedsApproval,
        writes: Writes::Unrecorded,
        preview: Preview::Arguments,
        subject: command::subject,
        describe: command::spec,
        run: Run::Cancellable(run_command),
        sets_plan: false,
        min_window_tokens: 0,
    },
    ToolSpec {
        name: Cow::Borrowed("pen_plan"),
        kind: ToolKind::Other,
        // It changes no file: a plan is a note to the owner, so it never asks (and may run in
        // a mode that allows only reads).
        effect: Effect::ReadOnly,
        writes: Writes::Nothing,
        preview: Preview::Arguments,
        subject: plan::subject,
        describe: plan::spec,
        run: Run::Blocking(plan::run),
        sets_plan: true,
        min_window_tokens: crate::limits::PLAN_TOOL_MIN_WINDOW_TOKENS,
    },
];

fn run_search(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    search::run(parse_arguments(arguments)?, ctx)
}

fn run_list(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    list::run(parse_arguments(arguments)?, ctx)
}

fn run_find(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    find::run(parse_arguments(arguments)?, ctx)
}

fn run_read(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    read::run(parse_arguments(arguments)?, ctx)
}

fn run_tail(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    tail::run(parse_arguments(arguments)?, ctx)
}

fn run_create(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    write::check_write_size(arguments, ctx.limits)?;
    write::create(parse_arguments(arguments)?, ctx)
}

fn run_edit(arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    write::check_write_size(arguments, ctx.limits)?;
    write::edit(parse_arguments(arguments)?, ctx)
}

fn run_command<'a>(
    arguments: &'a Value,
    ctx: &'a ToolContext<'a>,
    cancel: &'a CancellationToken,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move { command::run(parse_arguments(arguments)?, ctx, cancel).await })
}

/// The native tools, in catalog order.
pub fn native() -> &'static [ToolSpec] {
    &NATIVE
}

/// The native tool named `name`.
pub fn get(name: &str) -> Option<&'static ToolSpec> {
    NATIVE.iter().find(|spec| spec.name == name)
}

/// The native catalog for `limits`, in the order the model sees it.
pub fn catalog(limits: &Limits) -> Vec<CatalogEntry> {
    NATIVE.iter().map(|spec| spec.describe(limits)).collect()
}

/// Whether a turn under a `window_tokens` window offers the tool named `name` to the model: a
/// native tool says ([`ToolSpec::offered_under`]); any other (an MCP tool) is always offered.
pub fn offered_under(name: &str, window_tokens: u64) -> bool {
    get(name).is_none_or(|spec| spec.offered_under(window_tokens))
}

/// The names of the native tools that ask for approval: the ones `auto_approve` may name.
pub fn approvable_names() -> Vec<&'static str> {
    NATIVE
        .iter()
        .filter(|spec| spec.needs_approval())
        .map(|spec| spec.name.as_ref())
        .collect()
}

/// The kind of a call of `name`: a native tool's own, [`ToolKind::Other`] for any other (an MCP
/// tool).
pub fn kind_of(name: &str) -> ToolKind {
    get(name).map_or(ToolKind::Other, ToolSpec::kind)
}

/// What a call of `name` works on: a native tool says; any other (an MCP tool) is read from
/// its arguments alone. `None` arguments (not JSON) name nothing.
pub fn subject_of(name: &str, arguments: Option<&Value>) -> Subject {
    match (arguments, get(name)) {
        (None, _) => Subject::default(),
        (Some(arguments), Some(spec)) => spec.subject(arguments),
        (Some(arguments), None) => Subject::of_arguments(arguments),
    }
}

/// Whether reverting a turn undoes a call of `name`: a native tool says; any other (an MCP tool)
/// does not record what it does.
pub fn revertible(name: &str) -> bool {
    get(name).is_some_and(ToolSpec::revertible)
}

/// The error the model gets for a name no tool has, listing the native tools' names.
pub fn unknown_tool(name: &str) -> ToolError {
    unknown_among(name, NATIVE.iter().map(ToolSpec::name))
}

/// The error for a call of `name` where the tools are `tools` (a turn's: the native ones, then
/// its MCP servers'), so that a misspelt MCP tool is answered with the right name too.
pub fn unknown_among<'a>(name: &str, tools: impl IntoIterator<Item = &'a str>) -> ToolError {
    let names: Vec<&str> = tools.into_iter().collect();
    ToolError::new(
        ErrorCode::UnknownTool,
        format!(
            "there is no tool named `{name}`; the tools are {}",
            names.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::Workspace;
    use serde_json::json;

    const NAMES: [&str; 9] = [
        "pen_search",
        "pen_list",
        "pen_find",
        "pen_read",
        "pen_tail",
        "pen_create",
        "pen_edit",
        "pen_command",
        "pen_plan",
    ];

    #[test]
    fn every_native_tool_is_declared_once_in_catalog_order() {
        let names: Vec<&str> = native().iter().map(ToolSpec::name).collect();
        assert_eq!(names, NAMES);
        for name in NAMES {
            assert_eq!(get(name).map(ToolSpec::name), Some(name));
        }
        assert!(get("pen_write").is_none());
        let limits = Limits::default();
        for (spec, entry) in native().iter().zip(catalog(&limits)) {
            assert_eq!(entry.name, spec.name());
            assert_eq!(entry.input_schema["type"], "object", "{}", spec.name());
            assert_eq!(entry.input_schema["additionalProperties"], false);
            assert!(!entry.description.is_empty());
        }
    }

    #[test]
    fn approval_parallel_safety_execution_and_preview_are_declared() {
        let asks: Vec<&str> = approvable_names();
        assert_eq!(asks, ["pen_create", "pen_edit", "pen_command"]);
        let read_only: Vec<&str> = native()
            .iter()
            .filter(|spec| spec.read_only())
            .map(ToolSpec::name)
            .collect();
        assert_eq!(
            read_only,
            [
                "pen_search",
                "pen_list",
                "pen_find",
                "pen_read",
                "pen_tail",
                "pen_plan"
            ]
        );
        for spec in native() {
            // A read-only tool never needs approval, and every other native tool does.
            assert_ne!(spec.read_only(), spec.needs_approval(), "{}", spec.name());
            let expected = if spec.name() == "pen_command" {
                Execution::Cancellable
            } else {
                Execution::Blocking
            };
            assert_eq!(spec.execution(), expected, "{}", spec.name());
            let preview = if spec.name() == "pen_edit" {
                Preview::Diff
            } else {
                Preview::Arguments
            };
            assert_eq!(spec.preview(), preview, "{}", spec.name());
        }
    }

    #[test]
    fn kinds_writes_and_subjects_are_declared() {
        let kinds: Vec<(&str, ToolKind)> = native()
            .iter()
            .map(|spec| (spec.name(), spec.kind()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("pen_search", ToolKind::Search),
                ("pen_list", ToolKind::Search),
                ("pen_find", ToolKind::Search),
                ("pen_read", ToolKind::Read),
                ("pen_tail", ToolKind::Read),
                ("pen_create", ToolKind::Edit),
                ("pen_edit", ToolKind::Edit),
                ("pen_command", ToolKind::Execute),
                ("pen_plan", ToolKind::Other),
            ]
        );
        for spec in native() {
            // A tool writes nothing exactly when it only reads.
            assert_eq!(
                spec.writes() == Writes::Nothing,
                spec.read_only(),
                "{}",
                spec.name()
            );
        }
        let unrevertible: Vec<&str> = native()
            .iter()
            .filter(|spec| !spec.revertible())
            .map(ToolSpec::name)
            .collect();
        assert_eq!(unrevertible, ["pen_command"]);
        assert!(!revertible("mcp__s__t"));
        assert_eq!(kind_of("mcp__s__t"), ToolKind::Other);

        let title = |name: &str, arguments: Value| subject_of(name, Some(&arguments)).title(name);
        assert_eq!(
            title(
                "pen_read",
                json!({"path": "a.txt", "start_line": 10, "line_count": 51})
            ),
            "pen_read a.txt lines 10–60"
        );
        assert_eq!(
            title("pen_tail", json!({"path": "log", "line_count": 5})),
            "pen_tail log"
        );
        assert_eq!(title("pen_list", json!({"path": "src"})), "pen_list src");
        assert_eq!(
            title("pen_search", json!({"query": "fn", "path": "src"})),
            "pen_search \"fn\" in src"
        );
        assert_eq!(
            title("pen_create", json!({"path": "n.rs", "content": "x"})),
            "pen_create n.rs"
        );
        let edits = json!({"path": "a.rs", "edits": [{"old_text": "a", "new_text": "b"}, {"old_text": "c", "new_text": "d"}]});
        assert_eq!(title("pen_edit", edits), "pen_edit a.rs (2 edits)");
        let command = subject_of("pen_command", Some(&json!({"command": "ls", "cwd": "src"})));
        assert_eq!(command.title("pen_command"), "pen_command ls");
        assert!(
            command.paths.is_empty(),
            "a command's cwd is no file it works on"
        );
        assert_eq!(
            subject_of("pen_read", Some(&json!({"path": "a", "start_line": 3}))).line,
            Some(3)
        );
        assert_eq!(
            title("mcp__s__echo", json!({"text": "hi"})),
            "mcp__s__echo {\"text\":\"hi\"}"
        );
        assert_eq!(subject_of("pen_read", None), Subject::default());
    }

    #[test]
    fn only_pen_plan_sets_the_plan_and_a_small_window_is_not_offered_it() {
        let sets: Vec<&str> = native()
            .iter()
            .filter(|spec| spec.sets_plan())
            .map(ToolSpec::name)
            .collect();
        assert_eq!(sets, ["pen_plan"]);
        let threshold = crate::limits::PLAN_TOOL_MIN_WINDOW_TOKENS;
        let offered = |window: u64| -> Vec<&str> {
            native()
                .iter()
                .filter(|spec| spec.offered_under(window))
                .map(ToolSpec::name)
                .collect()
        };
        assert_eq!(offered(threshold), NAMES);
        assert_eq!(offered(threshold - 1), NAMES[..8]);
        assert_eq!(offered(4_096), NAMES[..8]);
        assert!(!offered_under("pen_plan", 4_096) && offered_under("pen_plan", threshold));
        assert!(offered_under("mcp__s__t", 1) && offered_under("pen_read", 1));
        // It asks no one and writes nothing.
        let spec = get("pen_plan").unwrap();
        assert!(spec.read_only() && !spec.needs_approval());
        assert_eq!(spec.writes(), Writes::Nothing);
        assert_eq!(
            subject_of(
                "pen_plan",
                Some(&json!({"steps": [{"text": "a", "status": "done"}]}))
            )
            .title("pen_plan"),
            "pen_plan 1 step"
        );
    }

    /// The catalog text of `name` for `limits`: its description and schema as one string.
    fn text_of(name: &str, limits: &Limits) -> String {
        let entry = get(name).unwrap().describe(limits);
        format!("{}\n{}", entry.description, entry.input_schema)
    }

    #[test]
    fn the_catalog_names_the_configured_limits() {
        let limits = Limits {
            max_tool_result_bytes: 4_096,
            max_page_lines: 37,
            max_list_entries: 41,
            max_write_argument_bytes: 3 * 1024,
            max_edit_file_bytes: 5 * 1024 * 1024,
            search: crate::limits::SearchLimits {
                max_matches: 43,
                max_files: 47,
                ..Default::default()
            },
            ..Limits::default()
        };
        let defaults = Limits::default();
        // A page is at most half the result cap: 2 KiB of 4 KiB, not the 32 KiB page limit.
        for (name, page) in [
            ("pen_read", "37 lines and 2 KiB"),
            ("pen_tail", "37 and 2 KiB"),
        ] {
            let text = text_of(name, &limits);
            assert!(text.contains(page), "{name}: {text}");
            assert!(text.contains("\"maximum\":37"), "{name}: {text}");
            assert!(!text.contains("32 KiB"), "{name}: {text}");
            assert!(text_of(name, &defaults).contains("32 KiB"));
        }
        assert!(text_of("pen_tail", &limits).contains("up to 5 MiB"));
        let list = text_of("pen_list", &limits);
        assert!(list.contains("At most 41 entries"), "{list}");
        assert!(list.contains("\"maximum\":41"), "{list}");
        for name in ["pen_create", "pen_edit"] {
            let text = text_of(name, &limits);
            assert!(text.contains("limited to 3 KiB"), "{name}: {text}");
        }
        let search = text_of("pen_search", &limits);
        assert!(search.contains("47 files read"), "{search}");
        assert!(search.contains("43 matches"), "{search}");
        // The cap is named where a page shrinks under it.
        let small = Limits::with_max_tool_result_bytes(1_024).unwrap();
        assert!(text_of("pen_read", &small).contains("200 lines and 512 bytes"));
    }

    #[test]
    fn an_unknown_name_lists_the_tools() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        let limits = Limits::default();
        let ctx = ToolContext::plain(&workspace, &limits);
        let err = super::super::call("pen_write", &json!({}), &ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownTool);
        assert_eq!(
            err.message,
            format!(
                "there is no tool named `pen_write`; the tools are {}",
                NAMES.join(", ")
            )
        );
    }
}
