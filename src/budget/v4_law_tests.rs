//! Policy 4's laws (SPEC §6): over sessions driven as the engine drives them (a plan after each
//! step, its compaction committed before the next), requests between two compactions extend
//! each other, excerpts never change, and a resumed session plans what the first one did; and
//! policy 4 is never weaker than policy 3: whenever policy 3 plans a request, policy 4 plans one
//! within the budget, and a "does not fit" error names a size above the budget it names.

use super::law_tests::{SYSTEM, family_strategy, tools};
use super::*;
use crate::providers::ToolCall;
use crate::transcript::{CallOutcome, Event, Item};
use proptest::prelude::*;
use serde_json::json;

/// One step of a policy-4 session: what the loop commits between requests. No late answers and
/// no `results_shrunk` cuts (each changes an earlier message by design).
#[derive(Debug, Clone)]
enum Step {
    Prompt(usize),
    /// An answer with calls and their results.
    Group(Vec<Call>),
    Answer,
    /// A pen_plan call of this many steps, its result and the `plan` entry the turn records.
    Plan(usize),
}

/// One call of a group and how it ended: the result is shaped as `shape`'s results are, about
/// `size` bytes long.
#[derive(Debug, Clone, Copy)]
struct Call {
    shape: Shape,
    size: usize,
    outcome: CallOutcome,
}

/// The shape of a result: what the excerpt quotes differs (a JSON result quoted again escapes
/// every quote and newline; a command's output is plain text).
#[derive(Debug, Clone, Copy)]
enum Shape {
    Read,
    List,
    Search,
    Command,
}

impl Call {
    fn read(size: usize) -> Call {
        Call {
            shape: Shape::Read,
            size,
            outcome: CallOutcome::Done,
        }
    }

    fn name(&self) -> &'static str {
        match self.shape {
            Shape::Read => "pen_read",
            Shape::List => "pen_list",
            Shape::Search => "pen_search",
            Shape::Command => "pen_command",
        }
    }

    fn arguments(&self, id: &str) -> String {
        match self.shape {
            Shape::Read => json!({"path": format!("src/{id}.rs")}),
            Shape::List => json!({"path": format!("d/{id}")}),
            Shape::Search => json!({"query": format!("fn {id}"), "path": "src"}),
            Shape::Command => json!({"command": "cargo test", "cwd": id}),
        }
        .to_string()
    }

    /// The result's content as the tool writes it, about `size` bytes, or the error or denial
    /// text a failed call records. Built from repeated pieces already escaped, as the tool's
    /// JSON holds them: the laws drive many thousands of sessions.
    fn content(&self, id: &str) -> String {
        let repeated = |piece: &str| piece.repeat(self.size / piece.len() + 1);
        match self.outcome {
            CallOutcome::Done => {}
            CallOutcome::Denied => return format!("{id}: denied by the owner"),
            _ => return format!("{id}: {}", repeated("error: no such file or directory; ")),
        }
        match self.shape {
            Shape::Read => format!(
                r#"{{"path":"src/{id}.rs","content":"{}","next_start_line":9}}"#,
                repeated(&format!(r#"    let value = \"{id}\"; // a line of code\n"#))
            ),
            Shape::List => format!(
                r#"{{"path":"d/{id}","entries":[{}],"total":9}}"#,
                repeated(r#"{"name":"file_001.rs","kind":"file","size":120},"#)
                    .trim_end_matches(',')
            ),
            Shape::Search => format!(
                r#"{{"matches":"{}","truncated":false}}"#,
                repeated(&format!(r#"src/{id}.rs:12: let value = \"{id}\";\n"#))
            ),
            Shape::Command => format!("exit status 0\n{}", repeated("test result: ok. 1 passed\n")),
        }
    }
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (1usize..400).prop_map(Step::Prompt),
        1 => (0usize..12).prop_map(Step::Plan),
        12 => prop::collection::vec(
            prop_oneof![6 => 10usize..1_500, 1 => 2_000usize..6_000].prop_map(Call::read),
            1..3
        )
        .prop_map(Step::Group),
        1 => Just(Step::Answer),
    ]
}

/// A session driven as the engine drives it under policy 4: after each step, one plan (at the
/// ratio of that request), and its compaction, when it makes one, committed before the next
/// step. Returns the records and each successful plan with the record count it was made at.
fn drive_v4(
    steps: &[Step],
    budget: Budget,
    ratios: &[f64],
    family: ProviderKind,
    low_water_percent: u64,
) -> (Vec<Record>, Vec<(usize, Plan)>) {
    let drive = Drive {
        budget_at: &|_| budget,
        ratios,
        family,
        low_water_percent,
        resume_after: None,
    };
    drive_v4_with(steps, &drive, |_| {})
}

/// How [`drive_v4_with`] plans: the budget of each step's request (a window that changes, a
/// rejection that lowers it), the calibration ratios in turn, the family, the low-water mark,
/// and the step after which the planner is rebuilt from the records alone (a resumed session).
struct Drive<'a> {
    budget_at: &'a dyn Fn(usize) -> Budget,
    ratios: &'a [f64],
    family: ProviderKind,
    low_water_percent: u64,
    resume_after: Option<usize>,
}

/// One request of a driven session, as the check of [`drive_v4_with`] sees it: the planner and
/// the records before the plan (its compaction not yet committed), the budget and estimator it
/// was planned with, and what policy 4 answered.
struct Planned<'a> {
    planner: &'a Planner,
    records: &'a [Record],
    budget: Budget,
    estimator: TokenEstimator,
    plan: &'a Result<Plan, BudgetError>,
    /// At the step the session was resumed (`plan` is the resumed planner's): what the planner
    /// that read every record as it came planned.
    resumed_from: Option<&'a Result<Plan, BudgetError>>,
}

/// [`drive_v4`] under `drive`, calling `check` with every request planned.
fn drive_v4_with(
    steps: &[Step],
    drive: &Drive<'_>,
    mut check: impl FnMut(Planned<'_>),
) -> (Vec<Record>, Vec<(usize, Plan)>) {
    let tools = tools();
    let mut records: Vec<Record> = Vec::new();
    let mut planner = Planner::new();
    let mut plans = Vec::new();
    let mut call = 0;
    let commit = |records: &mut Vec<Record>, planner: &mut Planner, item: Item| {
        let record = Record {
            seq: records.len() as u64 + 1,
            turn_id: None,
            created_at: 0,
            item,
        };
        planner.push(&record);
        records.push(record);
    };
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Prompt(len) => commit(
                &mut records,
                &mut planner,
                Item::UserPrompt {
                    text: "p".repeat(*len),
                },
            ),
            Step::Answer => commit(
                &mut records,
                &mut planner,
                Item::AssistantMessage(crate::transcript::AssistantMessage {
                    text: "done".into(),
                    ..Default::default()
                }),
            ),
            Step::Plan(count) => {
                call += 1;
                let id = format!("c{call}");
                let steps: Vec<crate::tools::plan::PlanStep> = (0..*count)
                    .map(|i| crate::tools::plan::PlanStep {
                        text: format!("step {i} of plan {id}: change the module and test it"),
                        status: if i == 0 {
                            crate::tools::plan::StepStatus::InProgress
                        } else {
                            crate::tools::plan::StepStatus::Pending
                        },
                    })
                    .collect();
                commit(
                    &mut records,
                    &mut planner,
                    Item::AssistantMessage(crate::transcript::AssistantMessage {
                        tool_calls: vec![ToolCall {
                            id: id.clone(),
                            name: "pen_plan".into(),
                            arguments: json!({ "steps": steps }).to_string(),
                        }],
                        ..Default::default()
                    }),
                );
                commit(
                    &mut records,
                    &mut planner,
                    Item::ToolResult(crate::transcript::ToolResult {
                        call_id: id.clone(),
                        name: Some("pen_plan".into()),
                        content: json!({"plan": crate::tools::plan::summary(&steps)}).to_string(),
                        is_error: false,
                        outcome: Some(CallOutcome::Done),
                    }),
                );
                commit(
                    &mut records,
                    &mut planner,
                    Item::Event(Event::Plan { call_id: id, steps }),
                );
            }
            Step::Group(made) => {
                let calls: Vec<ToolCall> = made
                    .iter()
                    .map(|made| {
                        call += 1;
                        let id = format!("c{call}");
                        ToolCall {
                            arguments: made.arguments(&id),
                            name: made.name().into(),
                            id,
                        }
                    })
                    .collect();
                commit(
                    &mut records,
                    &mut planner,
                    Item::AssistantMessage(crate::transcript::AssistantMessage {
                        tool_calls: calls.clone(),
                        ..Default::default()
                    }),
                );
                for (tool_call, made) in calls.iter().zip(made) {
                    commit(
                        &mut records,
                        &mut planner,
                        Item::ToolResult(crate::transcript::ToolResult {
                            call_id: tool_call.id.clone(),
                            name: Some(tool_call.name.clone()),
                            content: made.content(&tool_call.id),
                            is_error: made.outcome != CallOutcome::Done,
                            outcome: Some(made.outcome),
                        }),
                    );
                }
            }
        }
        let budget = (drive.budget_at)(n);
        let estimator = TokenEstimator::new(drive.family, drive.ratios[n % drive.ratios.len()]);
        let mut plan = planner.plan_v4(SYSTEM, &tools, budget, &estimator, drive.low_water_percent);
        let mut resumed_from = None;
        if drive.resume_after == Some(n) {
            // A new process reads the session from the store: it knows only the records, and
            // goes on from them.
            planner = super::planner_of(&records);
            let continued = std::mem::replace(
                &mut plan,
                planner.plan_v4(SYSTEM, &tools, budget, &estimator, drive.low_water_percent),
            );
            resumed_from = Some(continued);
        }
        check(Planned {
            planner: &planner,
            records: &records,
            budget,
            estimator,
            plan: &plan,
            resumed_from: resumed_from.as_ref(),
        });
        if let Ok(plan) = plan {
            if let Some(compaction) = &plan.compaction {
                commit(
                    &mut records,
                    &mut planner,
                    Item::Event(Event::ContextCompacted(compaction.clone())),
                );
            }
            plans.push((records.len(), plan));
        }
    }
    (records, plans)
}

/// The excerpts of a request by call id (the groups' words are empty, so each excerpt of a
/// joined block starts at its label; JSON-quoted fields hold no raw blank line).
fn excerpts_of(messages: &[Message]) -> Vec<(String, String)> {
    const LABEL: &str = "[earlier tool call, excerpted";
    let mut out = Vec::new();
    for message in messages {
        let Message::Assistant { text, .. } = message else {
            continue;
        };
        for piece in text.split("\n\n") {
            if !piece.starts_with(LABEL) {
                continue;
            }
            if let Some(id) = piece
                .split("\ncall_id: \"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
            {
                out.push((id.to_string(), piece.to_string()));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Policy 4's laws over sessions driven as the engine drives them: every request within the
    /// budget; between two compactions each request extends the one before it (its messages are
    /// the earlier request's messages, unchanged, then new ones); an excerpt's text is the same
    /// in every later request that shows it; and a planner fed the same records (compactions
    /// included) in one batch plans the same request, byte for byte, without compacting again.
    #[test]
    fn policy_4_requests_extend_each_other_between_compactions(
        steps in prop::collection::vec(step_strategy(), 1..90),
        max_input_tokens in 1_500u64..9_000,
        ratios in prop::collection::vec(0.6f64..2.5, 1..4),
        family in family_strategy(),
        low_water_percent in 20u64..=90,
    ) {
        let budget = Budget { max_input_tokens };
        let (records, plans) = drive_v4(&steps, budget, &ratios, family, low_water_percent);
        let mut seen: std::collections::HashMap<String, String> = Default::default();
        for pair in plans.windows(2) {
            let (previous, next) = (&pair[0].1, &pair[1].1);
            if next.compaction.is_none() {
                prop_assert!(next.messages.len() >= previous.messages.len());
                prop_assert_eq!(&next.messages[..previous.messages.len()], &previous.messages[..]);
            }
        }
        for (at, plan) in &plans {
            prop_assert!(plan.estimated_tokens <= max_input_tokens);
            prop_assert_eq!(plan.report.is_some(), plan.compaction.is_some());
            if let Some(report) = &plan.report {
                prop_assert_eq!(report.policy_version, 4);
            }
            for (id, text) in excerpts_of(&plan.messages) {
                let first = seen.entry(id.clone()).or_insert_with(|| text.clone());
                prop_assert_eq!(&*first, &text, "the excerpt of {} changed", id);
            }
            // Replayed from the records (a resumed session): the same request, no new step.
            let replayed = super::planner_of(&records[..*at]);
            for ratio in &ratios {
                let again = replayed.plan_v4(SYSTEM, &tools(), budget, &TokenEstimator::new(family, *ratio), low_water_percent);
                if let Ok(again) = again && again.compaction.is_none() {
                    prop_assert_eq!(&again.messages, &plan.messages);
                }
            }
        }
    }

    /// Two plans of the same transcript and recorded compactions are identical, whether the
    /// planner was fed record by record or all at once.
    #[test]
    fn policy_4_plans_of_the_same_records_are_identical(
        steps in prop::collection::vec(step_strategy(), 1..60),
        max_input_tokens in 1_500u64..9_000,
        ratio in 0.6f64..2.5,
        family in family_strategy(),
    ) {
        let budget = Budget { max_input_tokens };
        let (records, _) = drive_v4(&steps, budget, &[ratio], family, 55);
        let estimator = TokenEstimator::new(family, ratio);
        let one = super::planner_of(&records).plan_v4(SYSTEM, &tools(), budget, &estimator, 55);
        let two = super::planner_of(&records).plan_v4(SYSTEM, &tools(), budget, &estimator, 55);
        prop_assert_eq!(one, two);
    }
}

/// A compaction brings the request down to the low-water mark in one step (half the way from
/// the smallest request the policy can make, here a few hundred tokens, to the budget), and the
/// requests after it add only what the session adds until the budget is met again.
#[test]
fn a_compaction_goes_down_to_the_low_water_mark_and_then_waits() {
    let steps: Vec<Step> = std::iter::once(Step::Prompt(50))
        .chain((0..80).map(|i| Step::Group(vec![Call::read(300 + (i * 37) % 900)])))
        .collect();
    let budget = Budget {
        max_input_tokens: 6_000,
    };
    let (_, plans) = drive_v4(&steps, budget, &[1.0], ProviderKind::OpenAi, 50);
    let compactions: Vec<&Plan> = plans
        .iter()
        .map(|(_, plan)| plan)
        .filter(|plan| plan.compaction.is_some())
        .collect();
    assert!(compactions.len() >= 2, "{} compactions", compactions.len());
    for plan in &compactions {
        let mark = plan.compaction.as_ref().map_or(0, |c| c.low_water);
        assert!((3_000..3_500).contains(&mark), "{mark}");
        assert!(plan.estimated_tokens <= mark, "{}", plan.estimated_tokens);
    }
    // Many requests between two compactions: not one a request.
    assert!(
        plans.len() >= 5 * compactions.len(),
        "{} plans",
        plans.len()
    );
}

/// The plan a call set stays in view when a compaction excerpts, leaves out or drops its call:
/// it is carried right after the compacted part, the same text in every request until the next
/// compaction (so those requests still extend each other), and a plan set after a compaction
/// is sent whole where it was made.
#[test]
fn the_latest_plan_is_carried_past_a_compaction_without_changing_the_prefix() {
    const CARRIED: &str = "[your plan as you last set it before the prompt budget compacted";
    let steps: Vec<Step> = [Step::Prompt(50), Step::Plan(5)]
        .into_iter()
        .chain((0..40).map(|i| Step::Group(vec![Call::read(300 + (i * 37) % 900)])))
        .chain([Step::Plan(3)])
        .chain((0..40).map(|i| Step::Group(vec![Call::read(300 + (i * 41) % 900)])))
        .collect();
    let budget = Budget {
        max_input_tokens: 6_000,
    };
    let (_, plans) = drive_v4(&steps, budget, &[1.0], ProviderKind::OpenAi, 50);
    let carried = |plan: &Plan| -> Vec<String> {
        plan.messages
            .iter()
            .filter_map(|message| match message {
                Message::Assistant { text, .. } | Message::User { text } => Some(text),
                Message::ToolResult { .. } => None,
            })
            .filter_map(|text| text.find(CARRIED).map(|at| text[at..].to_string()))
            .collect()
    };
    let first = plans
        .iter()
        .position(|(_, plan)| plan.compaction.is_some())
        .expect("the session compacts");
    // Before any compaction nothing is carried: the call is sent whole.
    assert!(
        plans[..first]
            .iter()
            .all(|(_, plan)| carried(plan).is_empty())
    );
    let mut compactions = 0;
    for pair in plans[first..].windows(2) {
        let (previous, next) = (&pair[0].1, &pair[1].1);
        if next.compaction.is_some() {
            compactions += 1;
            continue;
        }
        assert_eq!(
            &next.messages[..previous.messages.len()],
            &previous.messages[..]
        );
    }
    assert!(compactions >= 2, "{compactions} compactions");
    // After each compaction the plan its compacted part holds is in view, whole: one carried
    // copy, every step a line (the first plan's 5 steps, later the second plan's 3).
    let lines = |plan: &Plan| {
        let carried = carried(plan);
        assert_eq!(carried.len(), 1, "{carried:?}");
        carried[0]
            .lines()
            .filter(|line| line.starts_with('[') && line.len() > 4 && &line[3..4] == " ")
            .count()
    };
    let (_, after_first) = &plans[first];
    assert_eq!(lines(after_first), 5);
    assert!(
        carried(after_first)[0].contains("\"step 4 of plan c1: change the module and test it\"")
    );
    let (_, last) = plans.last().expect("plans");
    assert_eq!(lines(last), 3, "{:?}", carried(last));
}

/// When whole exchanges are dropped and the plan's call went with them, the plan is carried
/// before the prompt of the first exchange kept (so the request still starts with the user);
/// every request that no longer shows the call carries it once.
#[test]
fn a_plan_whose_exchange_was_dropped_is_carried_before_the_first_prompt_kept() {
    const CARRIED: &str = "[your plan as you last set it before the prompt budget compacted";
    let mut steps = vec![Step::Prompt(50), Step::Plan(4)];
    for i in 0..6 {
        steps.push(Step::Prompt(40));
        steps.extend((0..4).map(|j| Step::Group(vec![Call::read(600 + (i * 7 + j * 31) % 700)])));
        steps.push(Step::Answer);
    }
    let budget = Budget {
        max_input_tokens: 5_000,
    };
    let (_, plans) = drive_v4(&steps, budget, &[1.0], ProviderKind::OpenAi, 50);
    let shows_call = |plan: &Plan| {
        plan.messages.iter().any(|m| {
            matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.id == "c1"))
        })
    };
    let mut in_prompt = 0;
    // From the request after the call was made on.
    let made = plans
        .iter()
        .position(|(_, plan)| shows_call(plan))
        .expect("the call is sent");
    for (_, plan) in &plans[made..] {
        let carried: usize = plan
            .messages
            .iter()
            .map(|m| match m {
                Message::User { text } | Message::Assistant { text, .. } => {
                    text.matches(CARRIED).count()
                }
                Message::ToolResult { .. } => 0,
            })
            .sum();
        assert_eq!(
            carried,
            usize::from(!shows_call(plan)),
            "{:?}",
            plan.messages.first()
        );
        if let Some(Message::User { text }) = plan.messages.first()
            && text.starts_with(CARRIED)
        {
            in_prompt += 1;
            assert_eq!(
                text.lines()
                    .filter(|l| l.starts_with("[>] ") || l.starts_with("[ ] "))
                    .count(),
                4
            );
        }
    }
    assert!(in_prompt > 0, "the plan's exchange was never dropped");
}

/// A recorded compaction that names calls the session never made (a damaged or hand-edited
/// entry), or an absurd count, applies no bound it cannot resolve: plans still fit the budget
/// (compacting again as needed) and nothing panics.
#[test]
fn a_compaction_naming_unknown_calls_is_not_applied() {
    let steps: Vec<Step> = std::iter::once(Step::Prompt(50))
        .chain((0..30).map(|i| Step::Group(vec![Call::read(400 + (i * 53) % 700)])))
        .collect();
    let budget = Budget {
        max_input_tokens: 4_000,
    };
    let (mut records, _) = drive_v4(&steps, budget, &[1.0], ProviderKind::OpenAi, 50);
    records.push(Record {
        seq: records.len() as u64 + 1,
        turn_id: None,
        created_at: 0,
        item: Item::Event(Event::ContextCompacted(crate::transcript::Compaction {
            policy_version: 4,
            dropped_count: u64::MAX,
            excerpted_through: Some("no-such-call".into()),
            omitted_through: Some("c1".into()),
            budget: 1,
            low_water: 1,
        })),
    });
    let estimator = TokenEstimator::new(ProviderKind::OpenAi, 1.0);
    let plan = super::planner_of(&records)
        .plan_v4(SYSTEM, &tools(), budget, &estimator, 50)
        .expect("a plan");
    assert!(plan.estimated_tokens <= budget.max_input_tokens);
    // The newest exchange is never dropped, whatever the count says.
    assert!(matches!(plan.messages.first(), Some(Message::User { .. })));
}

/// The small-results workload: a turn of 300 pen_list results of 0.1 to 0.8 KB, each about the
/// size of its own excerpt or smaller, at the budgets of found 8k, 12k, 16k and 32k windows
/// (output and margin capped at ¼ and 1/32 of the window). Every request is planned, within the
/// budget, and the turn compacts on the way. Policy 4 once failed each of these turns the first
/// time it reached the budget, naming a size below the budget it named: it left out only the
/// groups it had excerpted, and a group no larger than its excerpt is never excerpted.
#[test]
fn a_turn_of_many_small_results_is_planned_at_every_window() {
    let steps: Vec<Step> = std::iter::once(Step::Prompt(40))
        .chain((0..300).map(|i| {
            Step::Group(vec![Call {
                shape: Shape::List,
                size: 100 + (i * 131) % 700,
                outcome: CallOutcome::Done,
            }])
        }))
        .collect();
    let mut failed = Vec::new();
    for window in [8_000u64, 12_000, 16_000, 32_000] {
        let budget = Budget::new(window, (window / 4).min(4_096), (window / 32).min(2_560));
        let drive = Drive {
            budget_at: &|_| budget,
            ratios: &[1.0],
            family: ProviderKind::OpenAi,
            low_water_percent: 50,
            resume_after: None,
        };
        let (_, plans) = drive_v4_with(&steps, &drive, |planned| {
            if let Err(err) = planned.plan {
                failed.push(format!("window {window}: {err}"));
            }
        });
        assert!(plans.iter().any(|(_, plan)| plan.compaction.is_some()));
        for (_, plan) in &plans {
            assert!(plan.estimated_tokens <= budget.max_input_tokens);
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The generated sessions of the policy laws' property test: `PEN_LAW_CASES` when set (the
/// report's run: 100,000), else enough to run in a few seconds in a debug build.
fn law_cases() -> u32 {
    std::env::var("PEN_LAW_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_LAW_CASES)
}

const DEFAULT_LAW_CASES: u32 = 1_000;

/// A call as any tool's: results from 10 bytes to 64 KiB (most small or mid-sized), reads,
/// lists, searches and commands, some failed and some denied.
fn call_strategy() -> impl Strategy<Value = Call> {
    let shape = prop_oneof![
        Just(Shape::Read),
        Just(Shape::List),
        Just(Shape::Search),
        Just(Shape::Command)
    ];
    let size = prop_oneof![
        4 => 10usize..1_000,
        3 => 1_000usize..8_000,
        1 => 8_000usize..=64 * 1024,
    ];
    let outcome = prop_oneof![
        8 => Just(CallOutcome::Done),
        1 => Just(CallOutcome::Error),
        1 => Just(CallOutcome::Denied),
    ];
    (shape, size, outcome).prop_map(|(shape, size, outcome)| Call {
        shape,
        size,
        outcome,
    })
}

fn session_step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (1usize..2_000).prop_map(Step::Prompt),
        14 => prop::collection::vec(call_strategy(), 1..4).prop_map(Step::Group),
        1 => Just(Step::Answer),
    ]
}

/// Windows from 4,000 to 200,000 tokens, spread evenly on a log scale.
fn window_strategy() -> impl Strategy<Value = u64> {
    (0.0f64..=1.0).prop_map(|u| (4_000.0 * 50f64.powf(u)).round() as u64)
}

/// Whether a refusal names a size above the budget it names, and that budget is the request's.
fn honest(err: &BudgetError, budget: Budget) -> bool {
    match err {
        BudgetError::TooLarge {
            tokens, budget: b, ..
        } => *b == budget.max_input_tokens && tokens > b,
        BudgetError::InvalidHistory { .. } => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(law_cases()))]

    /// Policy 4 is never weaker than policy 3 (SPEC §6), over sessions driven as the engine
    /// drives them (windows of 4,000 to 200,000 tokens, outputs and margins, calibration
    /// ratios, a budget that changes mid-session as a rejection or a new window changes it, a
    /// session resumed from its records after recorded compactions): (a) whenever policy 3
    /// plans a request, policy 4 plans one within the budget (by its own estimate and by the
    /// estimator's count of the messages), provider-valid, the latest two groups sent whole,
    /// and, when it makes no compaction, the request before it with new messages after;
    /// (b) a "does not fit" error, from either policy, names a size above the budget it names;
    /// (c) policy 4's plan is a function of the durable transcript: a planner fed the same
    /// records at once plans the same request, the same compaction, the same error.
    #[test]
    fn policy_4_plans_wherever_policy_3_does(
        steps in prop::collection::vec(session_step_strategy(), 1..60),
        window in window_strategy(),
        output_divisor in 4u64..=32,
        margin_divisor in prop::option::of(32u64..=256),
        later in prop::option::of((any::<prop::sample::Index>(), 0.4f64..1.6)),
        resume in prop::option::of(any::<prop::sample::Index>()),
        ratios in prop::collection::vec(0.5f64..4.0, 1..4),
        family in family_strategy(),
        low_water_percent in 20u64..=90,
    ) {
        let base = Budget::new(window, window / output_divisor, margin_divisor.map_or(0, |d| window / d));
        let change = later.map(|(at, factor)| (at.index(steps.len()), factor));
        let budget_at = |n: usize| match change {
            Some((at, factor)) if n >= at => Budget {
                max_input_tokens: (base.max_input_tokens as f64 * factor) as u64,
            },
            _ => base,
        };
        let drive = Drive {
            budget_at: &budget_at,
            ratios: &ratios,
            family,
            low_water_percent,
            resume_after: resume.map(|at| at.index(steps.len())),
        };
        let tools = tools();
        let last = steps.len() - 1;
        let mut step = 0;
        let mut failures: Vec<String> = Vec::new();
        let mut previous: Vec<Message> = Vec::new();
        drive_v4_with(&steps, &drive, |p| {
            let at = format!("step {step}, budget {}", p.budget.max_input_tokens);
            let policy_3 = p.planner.plan(SYSTEM, &tools, p.budget, &p.estimator);
            for (policy, planned) in [("3", &policy_3), ("4", p.plan)] {
                if let Err(err) = planned && !honest(err, p.budget) {
                    failures.push(format!("{at}: policy {policy} refused dishonestly: {err}"));
                }
            }
            match (&policy_3, p.plan) {
                (Ok(_), Err(err)) => failures.push(format!("{at}: policy 3 planned, policy 4 refused: {err}")),
                (_, Ok(plan)) => {
                    let counted = p.estimator.request(SYSTEM, &tools, &plan.messages);
                    if plan.estimated_tokens > p.budget.max_input_tokens || counted > p.budget.max_input_tokens {
                        failures.push(format!("{at}: policy 4 planned {} ({counted} counted)", plan.estimated_tokens));
                    }
                    if !super::tests::provider_valid(&plan.messages) {
                        failures.push(format!("{at}: policy 4's request is not provider-valid"));
                    }
                    if plan.compaction.is_none() && !plan.messages.starts_with(&previous) {
                        failures.push(format!("{at}: policy 4 changed the request without a compaction"));
                    }
                    previous = plan.messages.clone();
                }
                (Err(_), Err(_)) => {}
            }
            if let Some(continued) = p.resumed_from && continued != p.plan {
                failures.push(format!("{at}: the resumed session planned another request"));
            }
            // The whole-session checks, once a session (they read all of it).
            if step == last {
                let untouched = p.planner.transcript_messages().unwrap_or_default();
                if let Ok(plan) = p.plan && !plan.messages.ends_with(super::tests::protected_tail(&untouched)) {
                    failures.push(format!("{at}: policy 4 did not send the latest two groups whole"));
                }
                let again = super::planner_of(p.records)
                    .plan_v4(SYSTEM, &tools, p.budget, &p.estimator, low_water_percent);
                if again != *p.plan {
                    failures.push(format!("{at}: the same records planned again differ"));
                }
            }
            step += 1;
        });
        prop_assert!(failures.is_empty(), "{:#?}", failures);
    }
}
