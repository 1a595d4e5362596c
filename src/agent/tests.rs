//! The loop against a scripted in-process provider and approver: every path of a turn,
//! asserted on the durable transcript and the requests the provider received. (The same
//! behaviour over real HTTP and stdio is tested in `tests/`.)

use super::*;
use crate::budget::TokenEstimator;
use crate::config::Config;
use crate::providers::{ErrorKind, FinishReason, Message};
use crate::providers::{
    ModelRequest, ModelResponse, Provider, ProviderError, ProviderKind, StreamEvent, ToolCall,
};
use crate::session::{Entry, EntryKind};
use crate::session::{LeaseOwner, NewEntry, SessionError, SessionStore};
use crate::tools::ToolError;
use crate::transcript::{AssistantMessage, Event, Item};
use request::tool_definitions;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// One scripted provider step.
enum Step {
    Answer(ModelResponse),
    Fail(ProviderError),
    /// Waits for Stop, then answers anyway: the answer that arrives just after cancellation.
    AnswerAfterStop(ModelResponse),
    /// Waits for Stop and reports it, as a cancelled stream does.
    HangUntilStop,
}

struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<ModelRequest>>,
    /// Fired when a request arrives, so a test can Stop at that point.
    on_request: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps: Mutex::new(steps.into()),
            requests: Mutex::default(),
            on_request: Mutex::default(),
        })
    }
}

impl Provider for Scripted {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(request.clone());
            if let Some(hook) = self.on_request.lock().unwrap().as_ref() {
                hook();
            }
            let step = self
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .expect("a scripted step");
            match step {
                Step::Answer(response) => {
                    if !response.text.is_empty() {
                        on_event(StreamEvent::TextDelta(response.text.clone()));
                    }
                    Ok(response)
                }
                Step::Fail(err) => Err(err),
                Step::AnswerAfterStop(response) => {
                    cancel.cancelled().await;
                    Ok(response)
                }
                Step::HangUntilStop => {
                    cancel.cancelled().await;
                    Err(ProviderError::new(ErrorKind::Cancelled, "stopped"))
                }
            }
        })
    }
}

/// Answers approvals from a script; records what it was asked.
struct Owner {
    answers: Mutex<VecDeque<ApprovalAnswer>>,
    asked: Mutex<Vec<ApprovalRequest>>,
    /// When set, the owner never answers (a test Stops meanwhile).
    silent: bool,
    on_ask: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl Approver for Owner {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        self.asked.lock().unwrap().push(request);
        if let Some(hook) = self.on_ask.lock().unwrap().as_ref() {
            hook();
        }
        if self.silent {
            return Box::pin(futures::future::pending());
        }
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("a scripted answer");
        Box::pin(async move { answer })
    }
}

fn owner(answers: Vec<ApprovalAnswer>) -> Arc<Owner> {
    Arc::new(Owner {
        answers: Mutex::new(answers.into()),
        asked: Mutex::default(),
        silent: false,
        on_ask: Mutex::default(),
    })
}

fn answer(text: &str, calls: &[(&str, &str, Value)]) -> ModelResponse {
    ModelResponse {
        text: text.to_string(),
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        finish_reason: if calls.is_empty() {
            FinishReason::EndTurn
        } else {
            FinishReason::ToolUse
        },
        usage: None,
        reasoning: Vec::new(),
    }
}

/// One turn of the fixture's session, run through the engine.
struct TestTurn {
    engine: Arc<Engine>,
    session_id: String,
    cancel: CancellationToken,
    tools: Arc<dyn ToolHost>,
    config: Config,
    approver: Arc<dyn Approver>,
    on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
}

impl TestTurn {
    async fn run(self, prompt: &str) -> TurnOutcome {
        let spec = TurnSpec {
            config: self.config,
            tools: self.tools,
            approver: self.approver,
            on_event: self.on_event,
        };
        self.engine
            .run_turn(&self.session_id, prompt, spec, self.cancel)
            .await
    }
}

struct Fixture {
    _data: tempfile::TempDir,
    root: tempfile::TempDir,
    store: Arc<SessionStore>,
    session: String,
    events: Arc<Mutex<Vec<AgentEvent>>>,
    cancel: CancellationToken,
}

impl Fixture {
    fn new() -> Fixture {
        let data = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let store = Arc::new(SessionStore::open(data.path()).unwrap());
        let session = store.new_session(None).unwrap().id;
        Fixture {
            _data: data,
            root,
            store,
            session,
            events: Arc::default(),
            cancel: CancellationToken::new(),
        }
    }

    /// A turn as every front end builds one: through the engine.
    fn turn(&self, provider: Arc<Scripted>, approver: Arc<Owner>, config: Config) -> TestTurn {
        let events = Arc::clone(&self.events);
        TestTurn {
            engine: Engine::with_provider(Arc::clone(&self.store), provider, "test-model"),
            session_id: self.session.clone(),
            cancel: self.cancel.clone(),
            tools: Arc::new(TurnTools::native(LocalTools {
                workspace: crate::workspace::Workspace::new(&[self.root.path().to_path_buf()])
                    .unwrap(),
                limits: crate::limits::Limits::default(),
                ledger: Arc::default(),
                editor: None,
                search_editor: None,
                watch: None,
                fitted: Default::default(),
            })),
            config,
            approver,
            on_event: Arc::new(move |event| events.lock().unwrap().push(event)),
        }
    }

    fn entries(&self) -> Vec<Entry> {
        self.store
            .transcript(&self.session, None, 500)
            .unwrap()
            .entries
    }

    fn results(&self) -> Vec<(String, String)> {
        self.entries()
            .into_iter()
            .filter(|e| e.kind == EntryKind::ToolResult)
            .map(|e| {
                (
                    e.payload["call_id"].as_str().unwrap().to_string(),
                    e.payload["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

#[tokio::test]
async fn a_tool_round_then_an_answer_ends_the_turn_and_every_step_is_durable() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("a.txt"), "alpha\n").unwrap();
    let provider = Scripted::new(vec![
        Step::Answer(answer(
            "Reading.",
            &[("c1", "pen_read", json!({"path": "a.txt"}))],
        )),
        Step::Answer(answer("It says alpha.", &[])),
    ]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("what is in a.txt?")
        .await;
    assert_eq!(
        outcome,
        TurnOutcome {
            stop_reason: StopReason::EndTurn,
            last_error: None,
            error_kind: None,
            usage: None,
            session_usage: None,
        }
    );
    let kinds: Vec<EntryKind> = fx.entries().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            // The session's context, recorded before its first request.
            EntryKind::Event,
            EntryKind::UserPrompt,
            EntryKind::AssistantMessage,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
            EntryKind::AssistantMessage,
            EntryKind::Event
        ]
    );
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    // The system prompt travels once, beside the messages, never as a message.
    assert!(requests.iter().all(|r| r.system.starts_with(SYSTEM_PROMPT)));
    let Message::ToolResult {
        content, is_error, ..
    } = &requests[1].messages[2]
    else {
        panic!("{:?}", requests[1].messages)
    };
    assert!(content.contains("alpha"), "{content}");
    assert!(!is_error);
    let kinds: Vec<String> = fx
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.event.kind().as_str().to_string())
        .collect();
    // The session's first turn says its window first.
    assert_eq!(
        kinds,
        [
            "context_window",
            "text_delta",
            "tool_call_started",
            "tool_call_finished",
            "text_delta",
            "turn_ended"
        ]
    );
    let seqs: Vec<u64> = fx.events.lock().unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_are_error_results_the_model_reads() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[
                ("c1", "pen_fly", json!({})),
                ("c2", "pen_read", json!({"path": 5})),
            ],
        )),
        Step::Answer(ModelResponse {
            tool_calls: vec![ToolCall {
                id: "c3".into(),
                name: "pen_read".into(),
                arguments: "{not json".into(),
            }],
            ..answer("", &[])
        }),
        Step::Answer(answer("ok", &[])),
    ]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("go")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let requests = provider.requests.lock().unwrap();
    let results: Vec<String> = requests[2]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert!(
        results[0].contains("no tool named `pen_fly`"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("`path`"), "{}", results[1]);
    assert!(results[2].contains("not valid JSON"), "{}", results[2]);
}

#[tokio::test]
async fn max_turn_requests_ends_the_turn() {
    let fx = Fixture::new();
    let steps = (0..3)
        .map(|i| Step::Answer(answer("", &[(&format!("c{i}"), "pen_list", json!({}))])))
        .collect();
    let config = Config {
        max_turn_requests: 3,
        ..Config::default()
    };
    let outcome = fx
        .turn(Scripted::new(steps), owner(vec![]), config)
        .run("loop")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::MaxTurnRequests);
}

#[tokio::test]
async fn denial_and_stale_authority_are_distinct_results() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("f.txt"), "one\n").unwrap();
    let provider = Scripted::new(vec![
        Step::Answer(answer("", &[("r", "pen_read", json!({"path": "f.txt"}))])),
        Step::Answer(answer(
            "",
            &[
                (
                    "deny",
                    "pen_edit",
                    json!({"path": "f.txt", "edits": [{"old_text": "one", "new_text": "two"}]}),
                ),
                (
                    "gone",
                    "pen_create",
                    json!({"path": "g.txt", "content": "x"}),
                ),
            ],
        )),
        Step::Answer(answer("blocked", &[])),
    ]);
    let approver = owner(vec![
        Ok((Decision::Deny, Some("not now".into()))),
        Err("the editor disconnected".into()),
    ]);
    let outcome = fx
        .turn(provider, Arc::clone(&approver), Config::default())
        .run("edit")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert_eq!(
        fx.results(),
        [
            ("r".into(), "done".into()),
            ("deny".into(), "denied".into()),
            ("gone".into(), "stale_authority".into())
        ]
    );
    let asked = approver.asked.lock().unwrap();
    assert!(
        asked[0].diff.as_deref().unwrap().contains("-one\n+two"),
        "{:?}",
        asked[0].diff
    );
    let contents: Vec<String> = fx
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::ToolResult)
        .map(|e| e.payload["content"].as_str().unwrap().to_string())
        .collect();
    assert!(contents[1].starts_with(DENIED_BY_OWNER) && contents[1].contains("not now"));
    assert!(contents[2].starts_with("approval no longer applies"));
    assert_eq!(
        std::fs::read_to_string(fx.root.path().join("f.txt")).unwrap(),
        "one\n"
    );
    assert!(!fx.root.path().join("g.txt").exists());
}

#[tokio::test]
async fn an_approved_edit_of_a_file_changed_meanwhile_is_stale_authority() {
    let fx = Fixture::new();
    let file = fx.root.path().join("f.txt");
    std::fs::write(&file, "one\n").unwrap();
    let provider = Scripted::new(vec![
        Step::Answer(answer("", &[("r", "pen_read", json!({"path": "f.txt"}))])),
        Step::Answer(answer(
            "",
            &[(
                "e",
                "pen_edit",
                json!({"path": "f.txt", "edits": [{"old_text": "one", "new_text": "two"}]}),
            )],
        )),
        Step::Answer(answer("done", &[])),
    ]);
    let approver = owner(vec![Ok((Decision::Allow, None))]);
    // The file changes while the owner looks at the diff.
    let changed = file.clone();
    *approver.on_ask.lock().unwrap() = Some(Box::new(move || {
        std::fs::write(&changed, "one\nmore\n").unwrap()
    }));
    fx.turn(provider, approver, Config::default())
        .run("edit")
        .await;
    assert_eq!(fx.results()[1], ("e".into(), "stale_authority".into()));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\nmore\n");
}

#[tokio::test]
async fn allow_for_session_and_auto_approve_skip_the_question() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[("a", "pen_create", json!({"path": "a.txt", "content": "a"}))],
        )),
        Step::Answer(answer(
            "",
            &[("b", "pen_create", json!({"path": "b.txt", "content": "b"}))],
        )),
        Step::Answer(answer(
            "",
            &[("c", "pen_command", json!({"command": "true"}))],
        )),
        Step::Answer(answer("done", &[])),
    ]);
    let approver = owner(vec![Ok((Decision::AllowForSession, None))]);
    let config = Config {
        auto_approve: vec!["pen_command".into()],
        ..Config::default()
    };
    fx.turn(provider, Arc::clone(&approver), config)
        .run("make files")
        .await;
    assert_eq!(approver.asked.lock().unwrap().len(), 1);
    assert!(fx.root.path().join("b.txt").exists());
    assert_eq!(
        fx.results()
            .iter()
            .map(|r| r.1.as_str())
            .collect::<Vec<_>>(),
        ["done", "done", "done"]
    );
}

#[tokio::test]
async fn stop_during_the_providers_answer_keeps_the_answer_and_marks_its_calls_not_executed() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![Step::AnswerAfterStop(answer(
        "Let me look.",
        &[("a", "pen_list", json!({})), ("b", "pen_list", json!({}))],
    ))]);
    let cancel = fx.cancel.clone();
    *provider.on_request.lock().unwrap() = Some(Box::new(move || cancel.cancel()));
    let outcome = fx
        .turn(provider, owner(vec![]), Config::default())
        .run("look")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    let assistant = fx
        .entries()
        .into_iter()
        .find(|e| e.kind == EntryKind::AssistantMessage)
        .unwrap();
    assert_eq!(assistant.payload["text"], "Let me look.");
    assert_eq!(
        fx.results(),
        [
            ("a".into(), "not_executed".into()),
            ("b".into(), "not_executed".into())
        ]
    );
    // The history stays valid for the next prompt.
    assert!(crate::budget::transcript_messages(&fx.entries()).is_ok());
}

#[tokio::test]
async fn stop_while_streaming_ends_cancelled_with_a_valid_history() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![Step::HangUntilStop]);
    let cancel = fx.cancel.clone();
    *provider.on_request.lock().unwrap() = Some(Box::new(move || cancel.cancel()));
    let outcome = fx
        .turn(provider, owner(vec![]), Config::default())
        .run("look")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(crate::budget::transcript_messages(&fx.entries()).is_ok());
}

#[tokio::test]
async fn stop_during_an_approval_withdraws_it_and_the_call_does_not_run() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![Step::Answer(answer(
        "",
        &[
            ("a", "pen_create", json!({"path": "a.txt", "content": "a"})),
            ("b", "pen_list", json!({})),
        ],
    ))]);
    let approver = Arc::new(Owner {
        answers: Mutex::default(),
        asked: Mutex::default(),
        silent: true,
        on_ask: Mutex::default(),
    });
    let cancel = fx.cancel.clone();
    *approver.on_ask.lock().unwrap() = Some(Box::new(move || cancel.cancel()));
    let outcome = fx
        .turn(provider, approver, Config::default())
        .run("create")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert_eq!(
        fx.results(),
        [
            ("a".into(), "not_executed".into()),
            ("b".into(), "not_executed".into())
        ]
    );
    assert!(!fx.root.path().join("a.txt").exists());
    assert!(
        fx.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.event.kind() == EventKind::ApprovalWithdrawn)
    );
}

#[tokio::test]
async fn stop_during_a_command_kills_it_with_an_outcome_unknown_result() {
    let fx = Fixture::new();
    let marker = fx.root.path().join("started");
    let provider = Scripted::new(vec![Step::Answer(answer(
        "",
        &[
            (
                "cmd",
                "pen_command",
                json!({"command": format!("touch {}; sleep 600", marker.display())}),
            ),
            ("after", "pen_list", json!({})),
        ],
    ))]);
    let cancel = fx.cancel.clone();
    let stopper = async move {
        while !marker.exists() {
            tokio::task::yield_now().await;
        }
        cancel.cancel();
    };
    let config = Config {
        auto_approve: vec!["pen_command".into()],
        ..Config::default()
    };
    let (outcome, ()) = tokio::join!(fx.turn(provider, owner(vec![]), config).run("run"), stopper);
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert_eq!(
        fx.results(),
        [
            ("cmd".into(), "unknown".into()),
            ("after".into(), "not_executed".into())
        ]
    );
    let content = fx
        .entries()
        .into_iter()
        .find(|e| e.kind == EntryKind::ToolResult)
        .unwrap()
        .payload["content"]
        .clone();
    assert!(
        content
            .as_str()
            .unwrap()
            .contains("inspect the state before retrying")
    );
}

fn too_long() -> ProviderError {
    ProviderError {
        kind: ErrorKind::ContextWindowExceeded,
        status: Some(400),
        message: "prompt is too long".into(),
        retry_after: None,
    }
}

#[tokio::test]
async fn a_context_window_rejection_cuts_the_newest_large_results_and_retries_once() {
    let fx = Fixture::new();
    std::fs::write(
        fx.root.path().join("big.log"),
        format!("{}\n", "log line ".repeat(17)).repeat(20_000),
    )
    .unwrap();
    let provider = Scripted::new(vec![
        Step::Answer(answer("", &[("r", "pen_read", json!({"path": "big.log"}))])),
        Step::Fail(too_long()),
        Step::Answer(answer("summarised", &[])),
    ]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("read the log")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 3, "no tool ran again; one retry");
    let Message::ToolResult { content, .. } = &requests[2].messages[2] else {
        panic!()
    };
    assert!(
        content.len() < 2_400 && content.contains("cut to its first 2 KiB"),
        "{}",
        content.len()
    );
    // The stored result is whole (a page fitted to the default window, more than the 2 KiB
    // head); the decision is an event.
    let stored = fx
        .entries()
        .into_iter()
        .find(|e| e.kind == EntryKind::ToolResult)
        .unwrap();
    assert!(stored.payload["content"].as_str().unwrap().len() > 3_000);
    assert!(
        fx.entries()
            .iter()
            .any(|e| e.payload["type"] == "results_shrunk")
    );
    assert!(
        fx.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.event.kind() == EventKind::ContextTrimmed)
    );
}

#[tokio::test]
async fn a_second_rejection_or_nothing_to_cut_ends_with_an_actionable_error() {
    let fx = Fixture::new();
    std::fs::write(
        fx.root.path().join("big.log"),
        format!("{}\n", "log line ".repeat(17)).repeat(20_000),
    )
    .unwrap();
    let provider = Scripted::new(vec![
        Step::Answer(answer("", &[("r", "pen_read", json!({"path": "big.log"}))])),
        Step::Fail(too_long()),
        Step::Fail(too_long()),
    ]);
    let outcome = fx
        .turn(provider, owner(vec![]), Config::default())
        .run("read")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Error);
    let error = outcome.last_error.unwrap();
    assert!(
        error.contains("still over the model's context window")
            && error.contains("start a new session"),
        "{error}"
    );

    // Nothing to cut or leave out: planned again under the rejected size, the prompt alone is
    // too large, and the turn says so without a second request.
    let fx = Fixture::new();
    let provider = Scripted::new(vec![Step::Fail(too_long())]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run(&"long ".repeat(100))
        .await;
    let error = outcome.last_error.unwrap();
    assert!(
        error.contains("rejected the request as over the model's context window")
            && error.contains("the current prompt")
            && error.contains("shorten the prompt"),
        "{error}"
    );
    assert_eq!(provider.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn other_provider_errors_end_the_turn_with_their_message() {
    let fx = Fixture::new();
    let err = ProviderError {
        kind: ErrorKind::BadRequest,
        status: Some(400),
        message: "max_tokens: 64000 > 8192".into(),
        retry_after: None,
    };
    let outcome = fx
        .turn(
            Scripted::new(vec![Step::Fail(err)]),
            owner(vec![]),
            Config::default(),
        )
        .run("hi")
        .await;
    assert_eq!(
        outcome,
        TurnOutcome {
            stop_reason: StopReason::Error,
            last_error: Some("max_tokens: 64000 > 8192".into()),
            error_kind: Some(TurnErrorKind::ProviderBadRequest),
            usage: None,
            session_usage: None,
        }
    );
}

#[tokio::test]
async fn a_call_left_by_a_crash_is_answered_before_the_next_turn() {
    let fx = Fixture::new();
    let append = |kind, payload| {
        fx.store
            .append(
                &fx.session,
                &NewEntry {
                    kind,
                    turn_id: None,
                    payload,
                },
            )
            .unwrap()
    };
    append(EntryKind::UserPrompt, json!({"text": "before the crash"}));
    append(
        EntryKind::AssistantMessage,
        json!({"text": "", "tool_calls": [{"id": "lost", "name": "pen_list", "arguments": "{}"}]}),
    );
    append(
        EntryKind::ToolCall,
        json!({"call_id": "lost", "name": "pen_list", "arguments": {}}),
    );
    let provider = Scripted::new(vec![Step::Answer(answer("fine", &[]))]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("again")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let requests = provider.requests.lock().unwrap();
    let Message::ToolResult { content, .. } = &requests[0].messages[2] else {
        panic!("{:?}", requests[0].messages)
    };
    assert!(content.contains("outcome unknown"), "{content}");
}

#[tokio::test]
async fn stop_during_a_file_tool_records_its_result_and_skips_the_rest() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("a.txt"), "alpha\n").unwrap();
    // The second call is not read-only, so it does not run beside the first (read-only calls
    // of one answer run together; see the next tests).
    let provider = Scripted::new(vec![Step::Answer(answer(
        "",
        &[
            ("first", "pen_read", json!({"path": "a.txt"})),
            (
                "second",
                "pen_create",
                json!({"path": "b.txt", "content": "b\n"}),
            ),
        ],
    ))]);
    let mut turn = fx.turn(Arc::clone(&provider), owner(vec![]), Config::default());
    // Its tools fire Stop while they run, then finish normally.
    turn.tools = rendezvous(&fx, 1, Some(fx.cancel.clone()));
    let outcome = turn.run("read twice").await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert_eq!(
        fx.results(),
        [
            ("first".into(), "done".into()),
            ("second".into(), "not_executed".into())
        ]
    );
    assert!(!fx.root.path().join("b.txt").exists());
    assert_eq!(
        provider.requests.lock().unwrap().len(),
        1,
        "no request after Stop"
    );
    assert!(crate::budget::transcript_messages(&fx.entries()).is_ok());
}

/// The uncalibrated estimate of a request with only the system prompt, the tools and `messages`.
fn raw_estimate(messages: &[Message]) -> u64 {
    TokenEstimator::new(ProviderKind::OpenAi, 1.0).request(
        SYSTEM_PROMPT,
        &tool_definitions(&crate::tools::registry::catalog(
            &crate::limits::Limits::default(),
        )),
        messages,
    )
}

/// A config whose budget is `budget` input tokens.
fn budget_config(budget: u64) -> Config {
    Config {
        context_window_tokens: Some(budget + 100),
        max_output_tokens: 100,
        budget_margin_tokens: 0,
        ..Config::default()
    }
}

fn with_usage(mut response: ModelResponse, input_tokens: u64) -> ModelResponse {
    response.usage = Some(crate::providers::Usage::new(input_tokens, 1));
    response
}

#[tokio::test]
async fn reported_usage_calibrates_the_next_plan() {
    // The first exchange fits the budget as estimated. The provider then reports twice the
    // estimate: the next request is planned at that ratio, and the first exchange is left out.
    // The first prompt is three times the fixed parts, so at twice the estimate the fixed
    // parts still fit but the first exchange does not.
    let bare = raw_estimate(&[]);
    let first = "alpha ".repeat(usize::try_from(bare * 2).unwrap());
    let first_request = raw_estimate(&[Message::User {
        text: first.clone(),
    }]);
    let budget = first_request + 600;
    for (reported, kept) in [(None, true), (Some(2 * first_request), false)] {
        let fx = Fixture::new();
        let mut reply = answer("noted", &[]);
        if let Some(tokens) = reported {
            reply = with_usage(reply, tokens);
        }
        let provider = Scripted::new(vec![Step::Answer(reply), Step::Answer(answer("ok", &[]))]);
        let outcome = fx
            .turn(Arc::clone(&provider), owner(vec![]), budget_config(budget))
            .run(&first)
            .await;
        assert_eq!(outcome.stop_reason, StopReason::EndTurn);
        let outcome = fx
            .turn(Arc::clone(&provider), owner(vec![]), budget_config(budget))
            .run("and then?")
            .await;
        assert_eq!(outcome.stop_reason, StopReason::EndTurn, "{outcome:?}");
        let requests = provider.requests.lock().unwrap();
        let sent_first = requests[1]
            .messages
            .iter()
            .any(|m| matches!(m, Message::User { text } if *text == first));
        assert_eq!(sent_first, kept, "reported {reported:?}");
        let stored = fx.entries();
        let answer_entry = stored
            .iter()
            .find(|e| e.kind == EntryKind::AssistantMessage)
            .unwrap();
        assert_eq!(answer_entry.payload["model"], "test-model");
        // The system part sent is pen's prompt with the session's recorded environment.
        let sent_estimate = TokenEstimator::new(ProviderKind::OpenAi, 1.0).request(
            &requests[0].system,
            &requests[0].tools,
            &[Message::User {
                text: first.clone(),
            }],
        );
        assert_eq!(
            answer_entry.payload["estimated_input_tokens"],
            json!(sent_estimate)
        );
        let trimmed = stored
            .iter()
            .filter(|e| e.payload["type"] == CONTEXT_TRIMMED)
            .count();
        assert_eq!(trimmed, usize::from(!kept));
    }
}

#[tokio::test]
async fn a_rejection_lowers_the_budget_for_the_rest_of_the_session() {
    // The configured window is far too large; the provider rejects the second turn's request.
    // The retry and every later request are planned under the rejected estimate, so the first
    // exchange is left out without another rejection.
    let fx = Fixture::new();
    let first = "alpha ".repeat(400);
    let provider = Scripted::new(vec![
        Step::Answer(answer("noted", &[])),
        Step::Fail(too_long()),
        Step::Answer(answer("ok", &[])),
        Step::Answer(answer("still ok", &[])),
    ]);
    let run = |text: String| {
        let turn = fx.turn(Arc::clone(&provider), owner(vec![]), Config::default());
        async move { turn.run(&text).await }
    };
    assert_eq!(run(first.clone()).await.stop_reason, StopReason::EndTurn);
    assert_eq!(run("second".into()).await.stop_reason, StopReason::EndTurn);
    assert_eq!(run("third".into()).await.stop_reason, StopReason::EndTurn);
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 4);
    let has_first = |r: &ModelRequest| {
        r.messages
            .iter()
            .any(|m| matches!(m, Message::User { text } if *text == first))
    };
    assert!(has_first(&requests[1]), "the rejected request");
    assert!(!has_first(&requests[2]), "the retry");
    assert!(!has_first(&requests[3]), "the next turn");
    let rejected: Vec<Entry> = fx
        .entries()
        .into_iter()
        .filter(|e| e.payload["type"] == CONTEXT_WINDOW_REJECTED)
        .collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].payload["model"], "test-model");
    assert!(rejected[0].payload["estimated_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn a_request_that_cannot_fit_ends_the_turn_naming_the_part() {
    let fx = Fixture::new();
    // The tools offered under a window this small (pen_plan is not) and the system prompt.
    let mut offered = crate::tools::registry::catalog(&crate::limits::Limits::default());
    offered.retain(|entry| crate::tools::registry::offered_under(&entry.name, raw_estimate(&[])));
    let bare = TokenEstimator::new(ProviderKind::OpenAi, 1.0).request(
        SYSTEM_PROMPT,
        &tool_definitions(&offered),
        &[],
    );
    // The tools and system prompt alone are over the budget.
    let provider = Scripted::new(vec![]);
    let outcome = fx
        .turn(
            Arc::clone(&provider),
            owner(vec![]),
            budget_config(bare - 1),
        )
        .run("hi")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Error);
    let error = outcome.last_error.unwrap();
    assert!(
        error.contains("the system prompt and the tool schemas")
            && error.contains("context_window_tokens"),
        "{error}"
    );
    assert!(provider.requests.lock().unwrap().is_empty());
    // The latest two reads do not fit: the turn ends before the request, with what to do.
    let fx = Fixture::new();
    // Each read (200 lines of 60 bytes) is about 3,000 tokens: one fits the budget, two do not.
    std::fs::write(
        fx.root.path().join("a.txt"),
        format!("{}\n", "x".repeat(59)).repeat(200),
    )
    .unwrap();
    let read = |id: &'static str| (id, "pen_read", json!({"path": "a.txt"}));
    let provider = Scripted::new(vec![
        Step::Answer(answer("", &[read("r1")])),
        Step::Answer(answer("", &[read("r2")])),
    ]);
    // (With the cap's pages: a turn fits each page to its window, so two reads always fit;
    // results the fit does not bound, as an MCP tool's are not, can still be too large.)
    let mut turn = fx.turn(
        Arc::clone(&provider),
        owner(vec![]),
        Config {
            budget_policy: 3,
            ..budget_config(bare + 4_500)
        },
    );
    turn.tools = Arc::new(TurnTools::native(LocalTools {
        workspace: crate::workspace::Workspace::new(&[fx.root.path().to_path_buf()]).unwrap(),
        limits: crate::limits::Limits::default(),
        ledger: Arc::default(),
        editor: None,
        search_editor: None,
        watch: None,
        fitted: host::FittedLimits::unfitted(crate::limits::Limits::default()),
    }));
    let outcome = turn.run("read it twice").await;
    let error = outcome.last_error.unwrap();
    assert!(
        error.contains("the latest two tool calls and their results")
            && error.contains("start a new session"),
        "{error}"
    );
    assert_eq!(provider.requests.lock().unwrap().len(), 2);
}

/// Entries as [`seed`] appends them.
type Seeded = Vec<(EntryKind, Value)>;

/// Appends raw entries to the fixture's session, as an older pen (or a hand edit) left them.
fn seed(fx: &Fixture, entries: &[(EntryKind, Value)]) {
    let entries: Vec<NewEntry> = entries
        .iter()
        .map(|(kind, payload)| NewEntry {
            kind: *kind,
            turn_id: Some("t0".into()),
            payload: payload.clone(),
        })
        .collect();
    fx.store.append_many(&fx.session, &entries).unwrap();
}

fn two_calls(first: &str, second: &str) -> Value {
    json!({"text": "", "tool_calls": [
        {"id": first, "name": "pen_command", "arguments": "{\"command\":\"sleep 5\"}"},
        {"id": second, "name": "pen_read", "arguments": "{\"path\":\"a.txt\"}"},
    ]})
}

/// Every call id of every assistant message, with the number of results it has.
fn result_counts(entries: &[Entry]) -> Vec<(String, usize)> {
    entries
        .iter()
        .filter(|e| e.kind == EntryKind::AssistantMessage)
        .flat_map(|e| {
            e.payload["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|call| {
            let id = call["id"].as_str().unwrap().to_string();
            let count = entries
                .iter()
                .filter(|e| e.kind == EntryKind::ToolResult && e.payload["call_id"] == id.as_str())
                .count();
            (id, count)
        })
        .collect()
}

/// Issue 11, item 1: today's pen answered only the call with its own `tool_call` entry, so a
/// session killed during the first of two calls failed every later prompt. Such a session, as
/// today's pen wrote it (the interrupted answer to the first call, then a prompt that failed),
/// recovers at its next turn by appending the missing answer, and nothing is rewritten.
#[tokio::test]
async fn a_session_bricked_by_a_kill_during_the_first_of_two_calls_recovers() {
    let fx = Fixture::new();
    seed(
        &fx,
        &[
            (EntryKind::UserPrompt, json!({"text": "go"})),
            (EntryKind::AssistantMessage, two_calls("cmd", "read")),
            (
                EntryKind::ToolCall,
                json!({"call_id": "cmd", "name": "pen_command"}),
            ),
            (
                EntryKind::ToolResult,
                json!({"call_id": "cmd", "status": "interrupted", "content": crate::session::INTERRUPTED_CONTENT}),
            ),
            (EntryKind::UserPrompt, json!({"text": "again"})),
            (
                EntryKind::Event,
                json!({"type": "turn_ended", "stop_reason": "error", "last_error": "entry 5 follows tool call read (entry 2) that has no result; the session history is inconsistent"}),
            ),
        ],
    );
    let before = fx.entries();
    let provider = Scripted::new(vec![Step::Answer(answer("Recovered.", &[]))]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("and now?")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn, "{outcome:?}");
    let after = fx.entries();
    assert_eq!(&after[..before.len()], &before[..], "no entry rewritten");
    assert_eq!(after[before.len()].payload["call_id"], "read");
    assert_eq!(after[before.len()].payload["status"], "not_executed");
    assert_eq!(
        result_counts(&after),
        vec![("cmd".to_string(), 1), ("read".to_string(), 1)]
    );
    // The model sees both calls answered, in order, the late answer in its group.
    let request = &provider.requests.lock().unwrap()[0];
    let results: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["cmd", "read"]);
}

/// Issue 11, item 3: each kind of inconsistency, written by hand. The repairable ones (calls
/// left without a result, wherever) continue; the others end with an error that names the
/// entry, says to start a new session, and carries the kind the editors act on.
#[tokio::test]
async fn inconsistent_histories_are_repaired_or_refused_with_a_new_session_offer() {
    let read = |id: &str| json!({"text": "", "tool_calls": [{"id": id, "name": "pen_read", "arguments": "{}"}]});
    let result = |id: &str| json!({"call_id": id, "content": "ok", "status": "done"});
    let repairable: Vec<(&str, Seeded)> = vec![
        (
            "the last message's calls never started",
            vec![(EntryKind::AssistantMessage, two_calls("a", "b"))],
        ),
        (
            "a call without a result before a later prompt",
            vec![
                (EntryKind::AssistantMessage, read("a")),
                (EntryKind::UserPrompt, json!({"text": "next"})),
            ],
        ),
        (
            "calls missing in two groups",
            vec![
                (EntryKind::AssistantMessage, two_calls("a", "b")),
                (EntryKind::ToolResult, result("a")),
                (EntryKind::AssistantMessage, read("c")),
                (EntryKind::ToolCall, json!({"call_id": "c"})),
                (
                    EntryKind::AssistantMessage,
                    json!({"text": "done", "tool_calls": []}),
                ),
            ],
        ),
    ];
    for (what, entries) in repairable {
        let fx = Fixture::new();
        seed(&fx, &entries);
        let provider = Scripted::new(vec![Step::Answer(answer("ok", &[]))]);
        let outcome = fx
            .turn(provider, owner(vec![]), Config::default())
            .run("continue")
            .await;
        assert_eq!(
            outcome.stop_reason,
            StopReason::EndTurn,
            "{what}: {outcome:?}"
        );
        assert!(
            result_counts(&fx.entries()).iter().all(|(_, n)| *n == 1),
            "{what}"
        );
    }
    let unrepairable: Vec<(&str, Seeded, &str)> = vec![
        (
            "a repeated call id",
            vec![
                (EntryKind::AssistantMessage, read("a")),
                (EntryKind::ToolResult, result("a")),
                (EntryKind::AssistantMessage, read("a")),
                (EntryKind::ToolResult, result("a")),
            ],
            "entry 3 repeats tool call id a",
        ),
        (
            "a result without its call",
            vec![(EntryKind::ToolResult, result("ghost"))],
            "entry 1 is a result for tool call ghost",
        ),
        (
            "two results for one call",
            vec![
                (EntryKind::AssistantMessage, read("a")),
                (EntryKind::ToolResult, result("a")),
                (EntryKind::ToolResult, result("a")),
            ],
            "entry 3 is a result for tool call a",
        ),
        (
            "results out of call order",
            vec![
                (EntryKind::AssistantMessage, two_calls("a", "b")),
                (EntryKind::ToolResult, result("b")),
                (EntryKind::ToolResult, result("a")),
            ],
            "entry 2 is a result for tool call b",
        ),
    ];
    for (what, entries, names) in unrepairable {
        let fx = Fixture::new();
        seed(&fx, &entries);
        let provider = Scripted::new(vec![]);
        let outcome = fx
            .turn(Arc::clone(&provider), owner(vec![]), Config::default())
            .run("continue")
            .await;
        assert_eq!(outcome.stop_reason, StopReason::Error, "{what}");
        assert_eq!(
            outcome.error_kind,
            Some(TurnErrorKind::HistoryUnrepairable),
            "{what}"
        );
        let error = outcome.last_error.unwrap_or_default();
        assert!(error.starts_with(names), "{what}: {error}");
        assert!(error.contains("start a new session"), "{what}: {error}");
        assert!(provider.requests.lock().unwrap().is_empty(), "{what}");
        let ended = fx.entries().pop().unwrap();
        assert_eq!(
            ended.payload["error_kind"], "history_unrepairable",
            "{what}"
        );
    }
}

/// Issue 11, item 2, in one process: a turn under another live process's lease ends at once,
/// writes nothing and answers none of that process's calls.
#[tokio::test]
async fn a_turn_in_a_session_another_pen_is_running_writes_nothing() {
    let fx = Fixture::new();
    seed(
        &fx,
        &[
            (EntryKind::AssistantMessage, two_calls("a", "b")),
            (EntryKind::ToolCall, json!({"call_id": "a"})),
        ],
    );
    let other = crate::session::LeaseOwner {
        pid: 1,
        token: "another pen".into(),
    };
    fx.store.acquire_lease(&fx.session, &other).unwrap();
    let before = fx.entries();
    let outcome = fx
        .turn(Scripted::new(vec![]), owner(vec![]), Config::default())
        .run("hi")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Error);
    assert_eq!(outcome.error_kind, Some(TurnErrorKind::SessionBusy));
    assert!(
        outcome
            .last_error
            .unwrap_or_default()
            .contains("is running a turn in another pen (pid 1)")
    );
    assert_eq!(fx.entries(), before);
    // Once released, the next turn takes the lease, recovers and releases it again.
    fx.store.release_lease(&fx.session, &other).unwrap();
    let outcome = fx
        .turn(
            Scripted::new(vec![Step::Answer(answer("ok", &[]))]),
            owner(vec![]),
            Config::default(),
        )
        .run("hi")
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    fx.store
        .acquire_lease(&fx.session, &other)
        .expect("released at the turn's end");
}

/// The heartbeat runs while a turn does: when it finds the lease taken over (this process was
/// frozen past the expiry and another pen took the session), the turn stops, and its end does
/// not release the other pen's lease. Real time: one heartbeat.
#[tokio::test]
async fn a_turn_whose_lease_was_taken_over_stops_at_the_next_heartbeat() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![Step::HangUntilStop]);
    let other = crate::session::LeaseOwner {
        pid: 1,
        token: "another pen".into(),
    };
    let store = Arc::clone(&fx.store);
    let session = fx.session.clone();
    let thief = other.clone();
    // Once the turn is waiting on the provider, the other pen takes the lease over.
    *provider.on_request.lock().unwrap() = Some(Box::new(move || {
        store
            .release_lease(&session, LeaseOwner::this_process())
            .unwrap();
        store.acquire_lease(&session, &thief).unwrap();
    }));
    let outcome = tokio::time::timeout(
        crate::limits::SESSION_LEASE_HEARTBEAT * 5,
        fx.turn(provider, owner(vec![]), Config::default())
            .run("hi"),
    )
    .await
    .expect("the turn stops at the next heartbeat");
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    let held = fx
        .store
        .acquire_lease(&fx.session, LeaseOwner::this_process())
        .expect_err("the other pen keeps its lease");
    assert!(matches!(held, SessionError::LeaseHeld { pid: 1, .. }));
    fx.store.release_lease(&fx.session, &other).unwrap();
}

/// A model (hostile, or a local server that numbers calls per answer) that repeats a call id —
/// inside one answer, or one an earlier answer of the session used — must not brick the
/// session: the repeated ids are replaced before the answer is recorded, so every later request
/// is valid and every call is answered once.
#[tokio::test]
async fn a_model_that_repeats_call_ids_never_bricks_the_session() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("a.txt"), "alpha\n").unwrap();
    let read = json!({"path": "a.txt"});
    let provider = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[
                ("call_0", "pen_read", read.clone()),
                ("call_0", "pen_list", json!({})),
            ],
        )),
        Step::Answer(answer("", &[("call_0", "pen_read", read.clone())])),
        Step::Answer(answer("done", &[])),
        Step::Answer(answer("", &[("call_0", "pen_read", read)])),
        Step::Answer(answer("done again", &[])),
    ]);
    for prompt in ["first", "second"] {
        let outcome = fx
            .turn(Arc::clone(&provider), owner(vec![]), Config::default())
            .run(prompt)
            .await;
        assert_eq!(
            outcome.stop_reason,
            StopReason::EndTurn,
            "{prompt}: {outcome:?}"
        );
    }
    let counts = result_counts(&fx.entries());
    let unique: std::collections::BTreeSet<&String> = counts.iter().map(|(id, _)| id).collect();
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert_eq!(unique.len(), 4, "{counts:?}");
    // The first use of an id keeps it; only repeats are renamed.
    assert_eq!(counts[0].0, "call_0");
    assert!(counts.iter().all(|(_, n)| *n == 1), "{counts:?}");
}

/// "Allow for session" is a session entry: a later turn run by another engine (a restarted
/// daemon, or a second pen on the same database) does not ask again for that tool, and still
/// asks for the others.
#[tokio::test]
async fn an_allow_for_session_grant_is_stored_and_holds_in_another_engine() {
    let fx = Fixture::new();
    let first = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[(
                "a",
                "pen_create",
                json!({"path": "a.txt", "content": "a\n"}),
            )],
        )),
        Step::Answer(answer("done", &[])),
    ]);
    let approver = owner(vec![Ok((Decision::AllowForSession, None))]);
    fx.turn(first, Arc::clone(&approver), Config::default())
        .run("make a")
        .await;
    assert_eq!(approver.asked.lock().unwrap().len(), 1);
    let grants: Vec<Item> = fx
        .entries()
        .iter()
        .map(Entry::item)
        .filter(|item| matches!(item, Item::Event(Event::ToolAllowedForSession { .. })))
        .collect();
    assert_eq!(
        grants,
        [Item::Event(Event::ToolAllowedForSession {
            tool: "pen_create".into()
        })]
    );
    // A new engine (each fixture turn builds one) reads the grant from the store.
    let second = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[
                (
                    "b",
                    "pen_create",
                    json!({"path": "b.txt", "content": "b\n"}),
                ),
                ("c", "pen_command", json!({"command": "true"})),
            ],
        )),
        Step::Answer(answer("done", &[])),
    ]);
    let approver = owner(vec![Ok((Decision::Deny, None))]);
    fx.turn(second, Arc::clone(&approver), Config::default())
        .run("make b")
        .await;
    let asked: Vec<String> = approver
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.tool.clone())
        .collect();
    assert_eq!(asked, ["pen_command"], "pen_create stays allowed");
    assert!(fx.root.path().join("b.txt").exists());
}

/// The engine keeps each session's history between turns and reads only what was appended
/// since: entries another pen wrote meanwhile reach the next request.
#[tokio::test]
async fn the_history_catches_up_with_entries_another_pen_appended() {
    let fx = Fixture::new();
    let provider = Scripted::new(vec![
        Step::Answer(answer("one", &[])),
        Step::Answer(answer("two", &[])),
    ]);
    let engine = Engine::with_provider(
        Arc::clone(&fx.store),
        Arc::clone(&provider) as Arc<dyn Provider>,
        "test-model",
    );
    let spec = |fx: &Fixture| TurnSpec {
        config: Config::default(),
        tools: Arc::new(TurnTools::native(LocalTools::new(
            crate::workspace::Workspace::new(&[fx.root.path().to_path_buf()]).unwrap(),
            crate::limits::Limits::default(),
        ))),
        approver: owner(vec![]),
        on_event: Arc::new(|_| {}),
    };
    let run = engine
        .run_turn(&fx.session, "first", spec(&fx), CancellationToken::new())
        .await;
    assert_eq!(run.stop_reason, StopReason::EndTurn);
    // Another pen's turn, written straight to the store.
    for item in [
        Item::UserPrompt {
            text: "from the other pen".into(),
        },
        Item::AssistantMessage(AssistantMessage {
            text: "its answer".into(),
            ..AssistantMessage::default()
        }),
    ] {
        fx.store
            .append(&fx.session, &NewEntry::item(None, &item))
            .unwrap();
    }
    let run = engine
        .run_turn(&fx.session, "second", spec(&fx), CancellationToken::new())
        .await;
    assert_eq!(run.stop_reason, StopReason::EndTurn);
    let requests = provider.requests.lock().unwrap();
    let texts: Vec<&str> = requests[1]
        .messages
        .iter()
        .map(|m| match m {
            Message::User { text } => text.as_str(),
            Message::Assistant { text, .. } => text.as_str(),
            Message::ToolResult { content, .. } => content.as_str(),
        })
        .collect();
    assert_eq!(
        texts,
        ["first", "one", "from the other pen", "its answer", "second"]
    );
}

/// A second turn while one runs in this engine is refused before anything is written.
#[tokio::test]
async fn the_engine_runs_one_turn_per_session() {
    let fx = Fixture::new();
    let engine = Engine::with_provider(
        Arc::clone(&fx.store),
        Scripted::new(vec![]) as Arc<dyn Provider>,
        "test-model",
    );
    let first = engine
        .begin(&fx.session, CancellationToken::new())
        .await
        .expect("the first claim");
    assert!(engine.is_running(&fx.session));
    let second = engine.begin(&fx.session, CancellationToken::new()).await;
    assert!(matches!(second, Err(BeginError::Running(_))));
    assert_eq!(
        second.err().map(|e| e.kind()),
        Some(TurnErrorKind::SessionBusy)
    );
    drop(first);
    assert!(!engine.is_running(&fx.session), "a dropped claim releases");
    assert!(fx.entries().is_empty());
    assert!(!engine.stop(&fx.session));
}

/// A tool host whose calls each wait (bounded) until `expected` calls are running at once, so a
/// result says whether the calls ran side by side; with `stop`, each fires Stop while it runs,
/// then finishes normally.
struct Rendezvous {
    inner: TurnTools,
    meeting: Arc<Meeting>,
}

/// Where the calls of a [`Rendezvous`] wait for each other.
struct Meeting {
    expected: usize,
    running: (Mutex<usize>, std::sync::Condvar),
    stop: Option<CancellationToken>,
}

impl Meeting {
    /// Waits (bounded) until `expected` calls are here, then fires Stop if asked to.
    fn wait(&self) -> Result<(), ToolError> {
        let (count, arrived) = &self.running;
        let mut running = count.lock().unwrap();
        *running += 1;
        arrived.notify_all();
        let (running, waited) = arrived
            .wait_timeout_while(running, std::time::Duration::from_secs(20), |n| {
                *n < self.expected
            })
            .unwrap();
        drop(running);
        if waited.timed_out() {
            return Err(ToolError::new(
                crate::tools::ErrorCode::Io,
                "the calls did not run side by side",
            ));
        }
        if let Some(stop) = &self.stop {
            stop.cancel();
        }
        Ok(())
    }
}

/// A tool of a [`Rendezvous`]: its calls meet, then run as `inner`'s.
struct Meets {
    inner: Arc<dyn Tool>,
    meeting: Arc<Meeting>,
}

impl Tool for Meets {
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn needs_approval(&self, auto_approve: &[String]) -> bool {
        self.inner.needs_approval(auto_approve)
    }
    fn subject(&self, arguments: &Value) -> crate::tools::subject::Subject {
        self.inner.subject(arguments)
    }
    fn run(
        &self,
        call: crate::tools::Prepared,
        recorder: Option<crate::tools::Recorder>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (inner, meeting) = (Arc::clone(&self.inner), Arc::clone(&self.meeting));
        Box::pin(async move {
            // The wait blocks its thread, as the file tools do.
            tokio::task::spawn_blocking(move || meeting.wait())
                .await
                .unwrap()?;
            inner.run(call, recorder, cancel).await
        })
    }
    fn observe(&self, result: &Result<Value, ToolError>) -> String {
        self.inner.observe(result)
    }
}

impl ToolHost for Rendezvous {
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let inner = self.inner.get(name)?;
        Some(Arc::new(Meets {
            inner,
            meeting: Arc::clone(&self.meeting),
        }))
    }
    fn catalog(&self) -> Vec<crate::tools::CatalogEntry> {
        self.inner.catalog()
    }
}

fn rendezvous(fx: &Fixture, expected: usize, stop: Option<CancellationToken>) -> Arc<Rendezvous> {
    Arc::new(Rendezvous {
        inner: TurnTools::native(LocalTools::new(
            crate::workspace::Workspace::new(&[fx.root.path().to_path_buf()]).unwrap(),
            crate::limits::Limits::default(),
        )),
        meeting: Arc::new(Meeting {
            expected,
            running: Default::default(),
            stop,
        }),
    })
}

/// The read-only calls of one answer run concurrently; their results are recorded, and sent
/// back, in call order, each after its call.
#[tokio::test]
async fn read_only_calls_of_one_answer_run_side_by_side_and_answer_in_call_order() {
    let fx = Fixture::new();
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(fx.root.path().join(name), format!("{name}\n")).unwrap();
    }
    let provider = Scripted::new(vec![
        Step::Answer(answer(
            "",
            &[
                ("r1", "pen_read", json!({"path": "a.txt"})),
                ("r2", "pen_tail", json!({"path": "b.txt"})),
                ("r3", "pen_search", json!({"query": "c.txt"})),
            ],
        )),
        Step::Answer(answer("done", &[])),
    ]);
    let mut turn = fx.turn(Arc::clone(&provider), owner(vec![]), Config::default());
    turn.tools = rendezvous(&fx, 3, None);
    let outcome = turn.run("read three").await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert_eq!(
        fx.results(),
        [
            ("r1".into(), "done".into()),
            ("r2".into(), "done".into()),
            ("r3".into(), "done".into())
        ],
        "all three were running at once"
    );
    let kinds: Vec<EntryKind> = fx.entries().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds[2..9],
        [
            EntryKind::ToolCall,
            EntryKind::ToolCall,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
            EntryKind::ToolResult,
            EntryKind::ToolResult,
            EntryKind::AssistantMessage
        ]
    );
    let requests = provider.requests.lock().unwrap();
    let ids: Vec<&str> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["r1", "r2", "r3"]);
    assert!(crate::budget::transcript_messages(&fx.entries()).is_ok());
}

/// Stop while read-only calls run side by side: they finish and are recorded (they change
/// nothing); the call after them does not run.
#[tokio::test]
async fn stop_during_side_by_side_reads_records_them_and_skips_the_rest() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("a.txt"), "alpha\n").unwrap();
    let provider = Scripted::new(vec![Step::Answer(answer(
        "",
        &[
            ("r1", "pen_read", json!({"path": "a.txt"})),
            ("r2", "pen_list", json!({})),
            (
                "w",
                "pen_create",
                json!({"path": "b.txt", "content": "b\n"}),
            ),
        ],
    ))]);
    let mut turn = fx.turn(Arc::clone(&provider), owner(vec![]), Config::default());
    turn.tools = rendezvous(&fx, 2, Some(fx.cancel.clone()));
    let outcome = turn.run("read, then write").await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert_eq!(
        fx.results(),
        [
            ("r1".into(), "done".into()),
            ("r2".into(), "done".into()),
            ("w".into(), "not_executed".into())
        ]
    );
    assert!(!fx.root.path().join("b.txt").exists());
    assert!(crate::budget::transcript_messages(&fx.entries()).is_ok());
}

/// Every request's usage is an event with the turn's and the session's totals so far; the
/// turn's outcome carries both totals, and they are stored with the turn's end.
#[tokio::test]
async fn each_request_reports_its_usage_and_the_turn_ends_with_the_totals() {
    let fx = Fixture::new();
    std::fs::write(fx.root.path().join("a.txt"), "alpha\n").unwrap();
    let cached = |input, read, write, output| crate::providers::Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: Some(read),
        cache_write_tokens: Some(write),
        reasoning_tokens: None,
    };
    let mut first = answer("Reading.", &[("c1", "pen_read", json!({"path": "a.txt"}))]);
    first.usage = Some(cached(2000, 0, 1900, 20));
    let mut second = answer("It says alpha.", &[]);
    second.usage = Some(cached(2100, 1900, 150, 10));
    // A request whose provider reported nothing adds nothing, and no event.
    let mut third = answer("Again.", &[]);
    third.usage = None;
    let provider = Scripted::new(vec![Step::Answer(first), Step::Answer(second)]);
    let outcome = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("what is in a.txt?")
        .await;
    let turn = cached(4100, 1900, 2050, 30);
    assert_eq!(outcome.usage, Some(turn));
    assert_eq!(outcome.session_usage, Some(turn));
    let reports: Vec<RequestUsage> = fx
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match &e.event {
            TurnEvent::Usage(usage) => Some(usage.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reports,
        [
            RequestUsage {
                model: "test-model".into(),
                request: cached(2000, 0, 1900, 20),
                turn: cached(2000, 0, 1900, 20),
                session: cached(2000, 0, 1900, 20),
            },
            RequestUsage {
                model: "test-model".into(),
                request: cached(2100, 1900, 150, 10),
                turn,
                session: turn,
            },
        ]
    );
    // The next turn's totals start again; the session's go on.
    let provider = Scripted::new(vec![Step::Answer(third)]);
    let next = fx
        .turn(Arc::clone(&provider), owner(vec![]), Config::default())
        .run("again")
        .await;
    assert_eq!(next.usage, None);
    assert_eq!(next.session_usage, Some(turn));
    let ends: Vec<(
        Option<crate::providers::Usage>,
        Option<crate::providers::Usage>,
    )> = fx
        .entries()
        .iter()
        .filter_map(|entry| match entry.item() {
            Item::Event(Event::TurnEnded {
                usage,
                session_usage,
                ..
            }) => Some((usage, session_usage)),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [(Some(turn), Some(turn)), (None, Some(turn))]);
}
