//! pen_plan end to end over `pen serve`: a scripted model sets a plan and updates it; each
//! update reaches the editor as a typed `plan` event carrying the whole list, the transcript
//! records it, a new daemon on the same data shows it, and after the prompt budget compacts the
//! call away the model's next requests still show the latest plan while the requests between
//! compactions stay prefix-stable.

use super::cache_figures::{self, cache_order};
use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::LspClient;
use pen::providers::ToolCall;
use serde_json::{Value, json};
use std::path::Path;

/// A daemon on `data` and `root` speaking to the fake (OpenAI's format) under a 16k window,
/// answering every approval with a denial: pen_plan must never ask.
fn daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    let base = format!("{}/v1", fake.url());
    let env = [
        ("PEN_PROVIDER", "openai"),
        ("PEN_BASE_URL", base.as_str()),
        ("PEN_MODEL", "fake-model"),
    ];
    let mut client = LspClient::spawn(data, root, &env);
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client.initialize(root, &["utf-16"]);
    client.request(
        "pen/setConfig",
        json!({"context_window_tokens": 16_000, "max_output_tokens": 1_000,
               "budget_margin_tokens": 500, "auto_approve": ["pen_edit"],
               "max_turn_requests": 200}),
    );
    client
}

/// A pen_plan call `id` setting `steps` (`(text, status)`).
fn plan_call(id: &str, steps: &[(&str, &str)]) -> ToolCall {
    let steps: Vec<Value> = steps
        .iter()
        .map(|(text, status)| json!({"text": text, "status": status}))
        .collect();
    ToolCall {
        id: id.into(),
        name: "pen_plan".into(),
        arguments: json!({ "steps": steps }).to_string(),
    }
}

fn reply(calls: &[ToolCall]) -> Reply {
    Reply::Stream(openai_frames(
        &["Next."],
        calls,
        cache_figures::honest_usage(),
    ))
}

const FIRST: [(&str, &str); 3] = [
    ("read the parser", "in_progress"),
    ("fix the off-by-one", "pending"),
    ("run the tests", "pending"),
];
const SECOND: [(&str, &str); 3] = [
    ("read the parser", "done"),
    ("fix the off-by-one", "in_progress"),
    ("run the tests", "pending"),
];

/// `steps` as a `plan` event's or entry's data.
fn plan_data(steps: &[(&str, &str)]) -> Value {
    json!({"steps": steps
        .iter()
        .map(|(text, status)| json!({"text": text, "status": status}))
        .collect::<Vec<_>>()})
}

#[test]
fn plan_updates_reach_the_editor_whole_and_a_reloaded_session_has_them() {
    let fake = FakeProvider::start();
    fake.push([
        reply(&[plan_call("p1", &FIRST)]),
        reply(&[plan_call("p2", &SECOND)]),
        Reply::Stream(openai_frames(
            &["Done."],
            &[],
            cache_figures::honest_usage(),
        )),
    ]);
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    let answer = d.prompt(&session, "Fix the parser.");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");

    // Each update is one `plan` event with the whole list, in order, after its call finished.
    let events: Vec<&Value> = d
        .notifications
        .iter()
        .filter(|n| n["method"] == "pen/event")
        .map(|n| &n["params"])
        .collect();
    let plans: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "plan")
        .copied()
        .collect();
    assert_eq!(plans.len(), 2, "{events:?}");
    assert_eq!(plans[0]["data"], plan_data(&FIRST));
    assert_eq!(plans[1]["data"], plan_data(&SECOND));
    assert_eq!(plans[0]["sessionId"], session.as_str());
    let finished = events
        .iter()
        .position(|e| e["kind"] == "tool_call_finished" && e["data"]["callId"] == "p1")
        .unwrap();
    let first_plan = events.iter().position(|e| e["kind"] == "plan").unwrap();
    assert!(finished < first_plan);
    // It asked no one, and its result is a short count.
    assert!(!events.iter().any(|e| e["kind"] == "approval_requested"));
    let transcript = d.transcript(&session);
    let results: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["data"]["state"], "done");
    assert_eq!(
        results[0]["data"]["content"],
        r#"{"plan":"plan: 0 of 3 done"}"#
    );
    assert_eq!(
        results[1]["data"]["content"],
        r#"{"plan":"plan: 1 of 3 done"}"#
    );
    // The transcript records each plan, with the event's data.
    let recorded: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "plan")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(recorded, [&plan_data(&FIRST), &plan_data(&SECOND)]);
    assert!(d.close().is_some());

    // A new daemon on the same data shows the same plan.
    let mut again = daemon(&fake, data.path(), root.path());
    let reloaded: Vec<Value> = again
        .transcript(&session)
        .into_iter()
        .filter(|e| e["kind"] == "plan")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(reloaded, [plan_data(&FIRST), plan_data(&SECOND)]);
}

/// The opening of the plan the prompt budget carries past a compaction.
const CARRIED: &str = "[your plan as you last set it before the prompt budget compacted";

#[test]
fn after_a_compaction_the_model_still_sees_the_latest_plan_and_the_prefix_holds() {
    const CALLS: usize = 80;
    let fake = FakeProvider::start();
    let mut replies = vec![reply(&[plan_call("p1", &FIRST)])];
    replies.extend((0..CALLS).map(|i| reply(&[cache_figures::call(i)])));
    replies.push(Reply::Stream(openai_frames(
        &["Done."],
        &[],
        cache_figures::honest_usage(),
    )));
    fake.push(replies);
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    cache_figures::workspace(root.path());
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    let answer = d.prompt(&session, "Read, search and edit the modules.");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");

    let bodies: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), CALLS + 2);
    let transcript = d.transcript(&session);
    let compactions = transcript
        .iter()
        .filter(|e| e["kind"] == "context_compacted")
        .count();
    assert!(compactions >= 1, "no compaction");
    // Whether a request shows the pen_plan call itself, and whether it carries the plan.
    let shows_call = |body: &Value| {
        body["messages"].as_array().unwrap().iter().any(|m| {
            m["tool_calls"]
                .as_array()
                .is_some_and(|calls| calls.iter().any(|c| c["id"] == "p1"))
        })
    };
    let carried = |body: &Value| body.to_string().matches(CARRIED).count();
    // Every request shows the plan: the call while it is sent whole, then the carried copy.
    let mut compacted_away = 0;
    for (i, body) in bodies.iter().enumerate().skip(1) {
        if shows_call(body) {
            assert_eq!(carried(body), 0, "request {i}");
            continue;
        }
        compacted_away += 1;
        assert_eq!(carried(body), 1, "request {i} lost the plan");
        let text = body.to_string();
        for (step, _) in FIRST {
            assert!(text.contains(step), "request {i} lost step {step:?}");
        }
        assert!(text.contains(r#"[>] \"read the parser\""#), "request {i}");
    }
    assert!(compacted_away > 0, "the plan's call was never compacted");
    // Only a compaction changes what was sent before: the carried plan breaks no prefix.
    let forms: Vec<Vec<u8>> = bodies.iter().map(cache_order).collect();
    let rewritten = forms
        .windows(2)
        .filter(|pair| !pair[1].starts_with(&pair[0]))
        .count();
    assert!(
        rewritten <= compactions,
        "{rewritten} requests rewrote the one before, {compactions} compactions"
    );
}
