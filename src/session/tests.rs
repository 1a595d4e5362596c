//! Unit tests of the session store on real SQLite files in temporary directories.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use proptest::prelude::*;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::*;

fn open(dir: &TempDir) -> SessionStore {
    SessionStore::open(dir.path()).expect("open the store")
}

/// A store whose clock advances one millisecond per reading, so every write lands in a new
/// millisecond and reorders the listing, as writes spread over real time would.
fn open_ticking(dir: &TempDir) -> SessionStore {
    let now = AtomicI64::new(1_000_000);
    SessionStore::open_with_clock(
        dir.path(),
        Box::new(move || now.fetch_add(1, Ordering::Relaxed)),
    )
    .expect("open the store")
}

fn entry(kind: EntryKind, payload: Value) -> NewEntry {
    NewEntry {
        kind,
        turn_id: None,
        payload,
    }
}

fn call(call_id: &str, turn_id: &str) -> NewEntry {
    NewEntry {
        kind: EntryKind::ToolCall,
        turn_id: Some(turn_id.to_owned()),
        payload: json!({"call_id": call_id, "name": "pen_read"}),
    }
}

fn result(call_id: &str) -> NewEntry {
    entry(
        EntryKind::ToolResult,
        json!({"call_id": call_id, "content": "ok"}),
    )
}

/// Every entry of a session, read page by page.
fn all_entries(store: &SessionStore, session_id: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .transcript(session_id, after, MAX_TRANSCRIPT_PAGE_ENTRIES)
            .expect("read the transcript");
        entries.extend(page.entries);
        match page.next_after_seq {
            Some(seq) => after = Some(seq),
            None => return entries,
        }
    }
}

fn seqs(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.seq).collect()
}

fn raw_connection(dir: &TempDir) -> Connection {
    Connection::open(dir.path().join(DATABASE_FILE)).expect("open the database file")
}

fn user_version(conn: &Connection) -> i64 {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("read user_version")
}

#[test]
fn migrations_run_on_an_empty_database_and_reopening_is_idempotent() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    assert_eq!(store.path(), dir.path().join(DATABASE_FILE));
    let session = store.new_session(Some("first")).expect("new session");
    store
        .append(
            &session.id,
            &entry(EntryKind::UserPrompt, json!({"text": "hi"})),
        )
        .expect("append");
    drop(store);
    assert_eq!(
        user_version(&raw_connection(&dir)),
        schema::supported_version()
    );

    for _ in 0..2 {
        let store = open(&dir);
        let info = store
            .get_session(&session.id)
            .expect("the session survives");
        assert_eq!(info.title.as_deref(), Some("first"));
        assert_eq!(info.entry_count, 1);
    }
    let conn = raw_connection(&dir);
    assert_eq!(user_version(&conn), schema::supported_version());
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .expect("journal mode");
    assert_eq!(mode, "wal");
}

#[test]
fn a_database_from_a_newer_pen_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    drop(open(&dir));
    let newer = schema::supported_version() + 1;
    raw_connection(&dir)
        .pragma_update(None, "user_version", newer)
        .expect("set user_version");

    let error = SessionStore::open(dir.path()).expect_err("a newer schema is refused");
    assert!(
        matches!(error, SessionError::NewerSchema { found, supported, .. }
            if found == newer && supported == schema::supported_version()),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("written by a newer pen. Upgrade pen")
    );
    // Refusing left the database as it was.
    assert_eq!(user_version(&raw_connection(&dir)), newer);
}

#[test]
fn seqs_run_from_one_without_gaps_in_each_session() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let a = store.new_session(None).expect("session a").id;
    let b = store.new_session(None).expect("session b").id;
    let mut expected_a = Vec::new();
    for i in 0..20 {
        let payload = json!({"i": i});
        if i % 5 == 4 {
            let batch = [
                entry(EntryKind::AssistantMessage, payload.clone()),
                entry(EntryKind::Event, payload),
            ];
            expected_a.extend(store.append_many(&a, &batch).expect("append many"));
        } else {
            expected_a.push(
                store
                    .append(&a, &entry(EntryKind::AssistantMessage, payload))
                    .expect("append"),
            );
        }
        if i % 2 == 0 {
            store
                .append(&b, &entry(EntryKind::Event, json!({"i": i})))
                .expect("append to b");
        }
    }
    assert_eq!(expected_a, (1..=24).collect::<Vec<u64>>());
    assert_eq!(seqs(&all_entries(&store, &a)), expected_a);
    assert_eq!(
        seqs(&all_entries(&store, &b)),
        (1..=10).collect::<Vec<u64>>()
    );
    assert_eq!(
        store.append_many(&a, &[]).expect("empty batch"),
        Vec::<u64>::new()
    );
    assert_eq!(store.get_session(&a).expect("a").entry_count, 24);
}

#[test]
fn entries_keep_kind_turn_payload_and_never_go_back_in_time() {
    let dir = TempDir::new().expect("temp dir");
    // A wall clock that runs backwards between writes.
    let now = AtomicI64::new(5_000);
    let store = SessionStore::open_with_clock(
        dir.path(),
        Box::new(move || now.fetch_sub(100, Ordering::Relaxed)),
    )
    .expect("open");
    let session = store.new_session(Some("t")).expect("session");
    assert_eq!(session.created_at, 5_000);
    let written: Vec<NewEntry> = EntryKind::ALL
        .into_iter()
        .map(|kind| NewEntry {
            kind,
            turn_id: Some(format!("turn-{}", kind.as_str())),
            payload: json!({"kind": kind.as_str(), "nested": {"b": 1, "a": [true, null]}}),
        })
        .collect();
    for new in &written {
        store.append(&session.id, new).expect("append");
    }
    let read = all_entries(&store, &session.id);
    for (new, stored) in written.iter().zip(&read) {
        assert_eq!(stored.kind, new.kind);
        assert_eq!(stored.turn_id, new.turn_id);
        assert_eq!(stored.payload, new.payload);
        assert_eq!(
            stored.created_at, 5_000,
            "clamped to the session's latest time"
        );
    }
    let info = store.get_session(&session.id).expect("info");
    assert_eq!((info.updated_at, info.entry_count), (5_000, 5));
}

#[test]
fn transcript_pages_return_every_entry_exactly_once() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    for count in [0_u64, 1, 2, 7, 20] {
        let session = store.new_session(None).expect("session").id;
        let batch: Vec<NewEntry> = (1..=count)
            .map(|i| entry(EntryKind::Event, json!({"n": i})))
            .collect();
        store.append_many(&session, &batch).expect("append");
        for limit in [0, 1, 2, 3, 7, 25] {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let page = store.transcript(&session, after, limit).expect("page");
                for entry in &page.entries {
                    assert_eq!(entry.payload, json!({"n": entry.seq}));
                }
                seen.extend(seqs(&page.entries));
                match page.next_after_seq {
                    Some(next) => {
                        assert_eq!(
                            page.entries.len(),
                            limit.max(1),
                            "only the last page is short"
                        );
                        assert_eq!(Some(next), page.entries.last().map(|entry| entry.seq));
                        after = Some(next);
                    }
                    None => break,
                }
            }
            assert_eq!(
                seen,
                (1..=count).collect::<Vec<_>>(),
                "count {count} limit {limit}"
            );
        }
        for after in [count, count + 1, u64::MAX] {
            let page = store
                .transcript(&session, Some(after), 10)
                .expect("past the end");
            assert_eq!((page.entries.len(), page.next_after_seq), (0, None));
        }
    }
    let session = store.new_session(None).expect("session").id;
    let batch: Vec<NewEntry> = (0..MAX_TRANSCRIPT_PAGE_ENTRIES + 3)
        .map(|i| entry(EntryKind::Event, json!(i)))
        .collect();
    store.append_many(&session, &batch).expect("append");
    let page = store.transcript(&session, None, usize::MAX).expect("page");
    assert_eq!(page.entries.len(), MAX_TRANSCRIPT_PAGE_ENTRIES);
    assert_eq!(
        page.next_after_seq,
        Some(MAX_TRANSCRIPT_PAGE_ENTRIES as u64)
    );
}

#[test]
fn transcript_pages_stay_within_the_byte_budget_but_never_come_back_empty() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    let big = |bytes: usize| entry(EntryKind::ToolResult, json!("x".repeat(bytes)));
    let three_eighths = MAX_TRANSCRIPT_PAGE_BYTES * 3 / 8;
    store
        .append_many(
            &session,
            &[
                big(three_eighths),
                big(three_eighths),
                big(three_eighths),
                big(MAX_TRANSCRIPT_PAGE_BYTES + 1),
                big(10),
            ],
        )
        .expect("append");
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store.transcript(&session, after, 100).expect("page");
        pages.push(seqs(&page.entries));
        match page.next_after_seq {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, vec![vec![1, 2], vec![3], vec![4], vec![5]]);
}

#[test]
fn list_sessions_is_newest_first_and_follows_activity() {
    let dir = TempDir::new().expect("temp dir");
    let store = open_ticking(&dir);
    let ids: Vec<String> = (0..5)
        .map(|i| {
            store
                .new_session(Some(&format!("s{i}")))
                .expect("session")
                .id
        })
        .collect();
    let listed = |store: &SessionStore| -> Vec<String> {
        let page = store.list_sessions(None, 100).expect("list");
        assert_eq!(page.next_cursor, None);
        page.sessions.into_iter().map(|info| info.id).collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(listed(&store), newest_first);
    // UUIDv7 ids sort by creation too.
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ids);

    store
        .append(&ids[1], &entry(EntryKind::UserPrompt, json!("again")))
        .expect("append");
    assert_eq!(listed(&store)[0], ids[1]);
    let page = store.list_sessions(None, 2).expect("first page");
    assert_eq!(page.sessions[0].entry_count, 1);
    assert_eq!(page.sessions[0].title.as_deref(), Some("s1"));
    assert!(page.next_cursor.is_some());
}

#[derive(Debug, Clone)]
enum Step {
    NewSession,
    /// Appends to the session with this index, modulo the number of sessions.
    Append(usize),
    /// Fetches the next page of the listing in progress.
    NextPage,
}

fn steps(max: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            Just(Step::NewSession),
            (0_usize..64).prop_map(Step::Append),
            Just(Step::NextPage),
        ],
        0..max,
    )
}

/// Runs a write step; a `NextPage` step (the caller's to handle) returns false.
fn write(store: &SessionStore, ids: &mut Vec<String>, step: &Step) -> bool {
    match step {
        Step::NewSession => ids.push(store.new_session(None).expect("session").id),
        Step::Append(index) if !ids.is_empty() => {
            let id = &ids[index % ids.len()];
            store
                .append(id, &entry(EntryKind::Event, json!(index)))
                .expect("append");
        }
        Step::Append(_) => {}
        Step::NextPage => return false,
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However creations and appends interleave with the pages, paging to the end returns
    /// every session that existed at the first page exactly once, none created later, newest
    /// first as of the first page.
    #[test]
    fn list_paging_is_stable_under_concurrent_writes(
        setup in steps(30),
        during in steps(80),
        page_size in 1_usize..5,
    ) {
        let dir = TempDir::new().expect("temp dir");
        let store = open_ticking(&dir);
        let mut ids = Vec::new();
        for step in &setup {
            write(&store, &mut ids, step);
        }
        let existing: BTreeSet<String> = ids.iter().cloned().collect();

        let mut page = store.list_sessions(None, page_size).expect("first page");
        let mut listed = page.sessions.clone();
        let mut during = during.iter();
        while let Some(cursor) = page.next_cursor.take() {
            for step in during.by_ref() {
                if !write(&store, &mut ids, step) {
                    break;
                }
            }
            page = store.list_sessions(Some(&cursor), page_size).expect("next page");
            prop_assert!(page.sessions.len() <= page_size);
            listed.extend(page.sessions.iter().cloned());
        }

        let listed_ids: Vec<&String> = listed.iter().map(|info| &info.id).collect();
        let unique: BTreeSet<String> = listed_ids.iter().map(|id| (*id).clone()).collect();
        prop_assert_eq!(listed_ids.len(), unique.len(), "a session came back twice");
        prop_assert_eq!(unique, existing);
        for pair in listed.windows(2) {
            prop_assert!((pair[0].updated_at, &pair[0].id) > (pair[1].updated_at, &pair[1].id));
        }
    }
}

#[test]
fn a_malformed_cursor_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    for cursor in ["", "garbage", "1.2", "1.2.", "x.2.s_1", "1.y.s_1"] {
        let error = store.list_sessions(Some(cursor), 10).expect_err(cursor);
        assert!(
            matches!(error, SessionError::InvalidCursor(_)),
            "{cursor}: {error:?}"
        );
    }
}

fn message(turn_id: &str, call_ids: &[&str]) -> NewEntry {
    let calls: Vec<Value> = call_ids
        .iter()
        .map(|id| json!({"id": id, "name": "pen_read", "arguments": "{}"}))
        .collect();
    NewEntry {
        kind: EntryKind::AssistantMessage,
        turn_id: Some(turn_id.to_owned()),
        payload: json!({"text": "", "tool_calls": calls}),
    }
}

fn interrupted(call_id: &str) -> Value {
    json!({
        "call_id": call_id,
        "status": "interrupted",
        "content": "interrupted; outcome unknown — inspect the state before retrying",
        "is_error": true,
    })
}

fn not_started(call_id: &str) -> Value {
    json!({
        "call_id": call_id,
        "status": "not_executed",
        "content": NOT_STARTED_CONTENT,
        "is_error": true,
    })
}

fn me() -> &'static LeaseOwner {
    LeaseOwner::this_process()
}

/// Another process that is alive for as long as any test runs: init, pid 1.
fn other_live_process() -> LeaseOwner {
    LeaseOwner {
        pid: 1,
        token: "other".to_owned(),
    }
}

#[test]
fn recover_interrupted_answers_each_unanswered_call_once() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    store
        .append_many(
            &session,
            &[
                message("t1", &["answered", "lost"]),
                call("answered", "t1"),
                result("answered"),
                call("lost", "t1"),
                // A result before its message does not answer its call.
                result("early"),
                message("t2", &["early", "mid-turn"]),
                call("early", "t2"),
                // An event naming a call id is not its result.
                entry(
                    EntryKind::Event,
                    json!({"call_id": "mid-turn", "type": "approval"}),
                ),
                // A `tool_call` entry no message lists is no call the model made: a result
                // for it would be a result without its call.
                call("bare", "t2"),
                entry(EntryKind::ToolCall, json!({"call_id": 7})),
                // A message whose first call ran, whose second was running when the process
                // died, and whose third never started: the later calls have no entry of their
                // own, only the message lists them.
                message("t3", &["done", "running", "never"]),
                call("done", "t3"),
                result("done"),
                call("running", "t3"),
            ],
        )
        .expect("append");

    store.acquire_lease(&session, me()).expect("lease");
    let recovered = store.recover_interrupted(&session, me()).expect("recover");
    assert_eq!(recovered, vec![15, 16, 17, 18, 19]);
    let entries = all_entries(&store, &session);
    let added: Vec<(EntryKind, Option<&str>, &Value)> = entries[14..]
        .iter()
        .map(|entry| (entry.kind, entry.turn_id.as_deref(), &entry.payload))
        .collect();
    assert_eq!(
        added,
        vec![
            (EntryKind::ToolResult, Some("t1"), &interrupted("lost")),
            (EntryKind::ToolResult, Some("t2"), &interrupted("early")),
            (EntryKind::ToolResult, Some("t2"), &not_started("mid-turn")),
            (EntryKind::ToolResult, Some("t3"), &interrupted("running")),
            (EntryKind::ToolResult, Some("t3"), &not_started("never")),
        ]
    );

    assert_eq!(
        store.recover_interrupted(&session, me()).expect("again"),
        Vec::<u64>::new()
    );
    assert_eq!(all_entries(&store, &session).len(), 19);
    let clean = store.new_session(None).expect("session").id;
    store.acquire_lease(&clean, me()).expect("lease");
    assert_eq!(
        store.recover_interrupted(&clean, me()).expect("empty"),
        Vec::<u64>::new()
    );
}

#[test]
fn a_message_left_with_no_call_started_gets_not_executed_for_each() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    store
        .append_many(
            &session,
            &[
                entry(EntryKind::UserPrompt, json!({"text": "go"})),
                message("t1", &["a", "b"]),
            ],
        )
        .expect("append");
    store.acquire_lease(&session, me()).expect("lease");
    store.recover_interrupted(&session, me()).expect("recover");
    let payloads: Vec<Value> = all_entries(&store, &session)[2..]
        .iter()
        .map(|entry| entry.payload.clone())
        .collect();
    assert_eq!(payloads, vec![not_started("a"), not_started("b")]);
}

#[test]
fn recovery_runs_only_under_the_lease() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    store
        .append_many(&session, &[message("t1", &["a"]), call("a", "t1")])
        .expect("append");
    let not_held = |error: SessionError| matches!(error, SessionError::LeaseNotHeld(_));
    assert!(not_held(
        store
            .recover_interrupted(&session, me())
            .expect_err("no lease")
    ));
    // A live process runs a turn: its call is not this process's to answer.
    store
        .acquire_lease(&session, &other_live_process())
        .expect("the other takes it");
    let held = store.acquire_lease(&session, me()).expect_err("busy");
    assert!(
        matches!(&held, SessionError::LeaseHeld { pid: 1, .. }),
        "{held:?}"
    );
    assert_eq!(
        held.to_string(),
        format!("session {session} is running a turn in another pen (pid 1)")
    );
    assert!(not_held(
        store
            .recover_interrupted(&session, me())
            .expect_err("theirs")
    ));
    assert_eq!(all_entries(&store, &session).len(), 2, "nothing appended");
    // Released, it is anyone's; a release by another owner leaves a lease alone.
    store
        .release_lease(&session, me())
        .expect("release of a lease not held is a no-op");
    assert!(store.acquire_lease(&session, me()).is_err());
    store
        .release_lease(&session, &other_live_process())
        .expect("release");
    store.acquire_lease(&session, me()).expect("free now");
    store
        .acquire_lease(&session, me())
        .expect("taken again by its owner");
    assert!(store.renew_lease(&session, me()).expect("renew"));
    assert!(
        !store
            .renew_lease(&session, &other_live_process())
            .expect("renew")
    );
    assert_eq!(
        store.recover_interrupted(&session, me()).expect("recover"),
        vec![3]
    );
}

#[test]
fn a_lease_expires_when_its_process_is_gone_or_its_heartbeat_is_old() {
    let dir = TempDir::new().expect("temp dir");
    let now = Arc::new(AtomicI64::new(1_000_000));
    let clock = Arc::clone(&now);
    let store =
        SessionStore::open_with_clock(dir.path(), Box::new(move || clock.load(Ordering::Relaxed)))
            .expect("open");
    let session = store.new_session(None).expect("session").id;

    // A process that has exited (reaped, so its pid names nothing until reused).
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead_pid = child.id();
    child.wait().expect("reap");
    let dead = LeaseOwner {
        pid: dead_pid,
        token: "dead".to_owned(),
    };
    store.acquire_lease(&session, &dead).expect("dead takes it");
    store
        .acquire_lease(&session, me())
        .expect("a dead owner's lease is expired");
    // The other one then finds it gone.
    assert!(!store.renew_lease(&session, &dead).expect("renew"));

    // A live process whose heartbeat stopped (frozen, or a recycled pid) holds it until the
    // expiry, and not a millisecond longer.
    store.release_lease(&session, me()).expect("release");
    store
        .acquire_lease(&session, &other_live_process())
        .expect("take");
    let expiry = i64::try_from(SESSION_LEASE_EXPIRY.as_millis()).expect("fits");
    now.fetch_add(expiry, Ordering::Relaxed);
    assert!(store.acquire_lease(&session, me()).is_err(), "still live");
    now.fetch_add(1, Ordering::Relaxed);
    store.acquire_lease(&session, me()).expect("expired");

    // An earlier process with this very pid is gone, whatever its heartbeat says.
    store.release_lease(&session, me()).expect("release");
    let earlier = LeaseOwner {
        pid: std::process::id(),
        token: "an earlier process".to_owned(),
    };
    store.acquire_lease(&session, &earlier).expect("take");
    store.acquire_lease(&session, me()).expect("recycled pid");
}

#[test]
fn a_version_1_database_gets_the_call_lists_of_its_messages() {
    let dir = TempDir::new().expect("temp dir");
    {
        // What today's main writes: version 1, a session bricked by a kill during the first
        // of two calls, and a later prompt that failed on it.
        let conn = raw_connection(&dir);
        conn.execute_batch(schema::MIGRATIONS[0]).expect("v1");
        conn.pragma_update(None, "user_version", 1)
            .expect("version");
        conn.execute_batch(
            r#"INSERT INTO sessions VALUES ('s_old', NULL, 1, 5, 1);
               INSERT INTO entries VALUES
                 ('s_old', 1, 'user_prompt', 't1', 1, 1, NULL, '{"text":"go"}'),
                 ('s_old', 2, 'assistant_message', 't1', 1, 2, NULL,
                  '{"text":"","tool_calls":[{"id":"a","name":"pen_command","arguments":"{}"},{"id":"b","name":"pen_read","arguments":"{}"},{"name":"no id"}]}'),
                 ('s_old', 3, 'tool_call', 't1', 1, 3, 'a', '{"call_id":"a"}'),
                 ('s_old', 4, 'tool_result', 't2', 1, 4, 'a', '{"call_id":"a","status":"interrupted"}'),
                 ('s_old', 5, 'user_prompt', 't2', 1, 5, NULL, '{"text":"again"}'),
                 ('s_old', 6, 'assistant_message', 't2', 1, 5, NULL, '{"text":"odd","tool_calls":{"id":"x"}}');"#,
        )
        .expect("v1 rows");
    }
    let store = open(&dir);
    assert_eq!(
        user_version(&raw_connection(&dir)),
        schema::supported_version()
    );
    store.acquire_lease("s_old", me()).expect("lease");
    assert_eq!(
        store.recover_interrupted("s_old", me()).expect("recover"),
        vec![7]
    );
    let entries = all_entries(&store, "s_old");
    assert_eq!(entries[6].payload, not_started("b"));
    assert_eq!(entries[6].turn_id.as_deref(), Some("t1"));
    assert_eq!(entries.len(), 7, "nothing rewritten, one answer appended");
}

#[test]
fn a_message_inserted_by_hand_lists_its_calls_too() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    raw_connection(&dir)
        .execute(
            r#"INSERT INTO entries VALUES (?1, 1, 'assistant_message', NULL, 1, 1, NULL,
                 '{"tool_calls":[{"id":"h","name":"pen_read","arguments":"{}"}]}')"#,
            [&session],
        )
        .expect("hand edit");
    store.acquire_lease(&session, me()).expect("lease");
    assert_eq!(
        store.recover_interrupted(&session, me()).expect("recover"),
        vec![2]
    );
}

#[test]
fn the_crash_hook_reads_its_count() {
    // Only the parsing: the abort itself is what the durability suite exercises.
    assert_eq!(parse_crash_hook("crash_after_appends=3"), Some(3));
    assert_eq!(parse_crash_hook("other, crash_after_appends=12"), Some(12));
    assert_eq!(parse_crash_hook("crash_after_appends=0"), None);
    assert_eq!(parse_crash_hook("crash_after_appends=x"), None);
    assert_eq!(parse_crash_hook(""), None);
}

#[test]
fn finding_unanswered_calls_reads_indexes_not_payloads() {
    let dir = TempDir::new().expect("temp dir");
    drop(open(&dir));
    let conn = raw_connection(&dir);
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {UNANSWERED_CALLS_SQL}"))
        .expect("explain")
        .query_map(["s"], |row| row.get::<_, String>(3))
        .expect("plan")
        .collect::<Result<_, _>>()
        .expect("plan rows");
    let plan = plan.join("\n");
    assert!(plan.contains("SEARCH listed USING"), "{plan}");
    assert!(
        plan.contains("SEARCH result USING COVERING INDEX entries_by_call_id"),
        "{plan}"
    );
    assert!(
        plan.contains("SEARCH started USING COVERING INDEX entries_by_call_id"),
        "{plan}"
    );
    assert!(!plan.contains("SCAN"), "no table is walked: {plan}");
}

#[test]
fn an_unknown_session_is_not_found() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let missing = "s_0000";
    let is_not_found =
        |error: SessionError| matches!(&error, SessionError::NotFound(id) if id == missing);
    let one = entry(EntryKind::Event, json!({}));
    assert!(is_not_found(store.get_session(missing).expect_err("get")));
    assert!(is_not_found(
        store.append(missing, &one).expect_err("append")
    ));
    assert!(is_not_found(
        store.append_many(missing, &[]).expect_err("empty batch")
    ));
    assert!(is_not_found(
        store.transcript(missing, None, 10).expect_err("transcript")
    ));
    assert!(is_not_found(
        store
            .recover_interrupted(missing, me())
            .expect_err("recover")
    ));
    assert!(is_not_found(
        store.acquire_lease(missing, me()).expect_err("lease")
    ));
    assert_eq!(
        SessionError::NotFound(missing.to_owned()).to_string(),
        "no session has the id \"s_0000\""
    );
}

#[test]
fn entries_cannot_be_changed_or_removed_even_with_sql() {
    let dir = TempDir::new().expect("temp dir");
    let store = open(&dir);
    let session = store.new_session(None).expect("session").id;
    store
        .append(&session, &entry(EntryKind::UserPrompt, json!("keep me")))
        .expect("append");
    let conn = raw_connection(&dir);
    for sql in [
        "UPDATE entries SET payload = '\"changed\"'",
        "DELETE FROM entries",
    ] {
        let error = conn.execute(sql, []).expect_err(sql);
        assert!(error.to_string().contains("append-only"), "{sql}: {error}");
    }
    assert_eq!(all_entries(&store, &session)[0].payload, json!("keep me"));
}

/// A daemon shares one store between its request handlers, so it must stay `Send + Sync`.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<SessionStore>();
};

#[test]
fn two_stores_append_concurrently_without_collisions() {
    const APPENDS_PER_WRITER: usize = 1_500;
    let dir = TempDir::new().expect("temp dir");
    let setup = open(&dir);
    let shared = setup.new_session(Some("shared")).expect("session").id;
    let own = [
        setup.new_session(Some("writer 0")).expect("session").id,
        setup.new_session(Some("writer 1")).expect("session").id,
    ];
    // Each writer has its own store, as two daemons would: two connections to one file.
    let written: Vec<Vec<(String, u64, Value)>> = std::thread::scope(|scope| {
        let writers: Vec<_> = own
            .iter()
            .enumerate()
            .map(|(writer, own)| {
                let (shared, dir) = (&shared, dir.path());
                scope.spawn(move || {
                    let store = SessionStore::open(dir).expect("open a second store");
                    let mut written = Vec::new();
                    for i in 0..APPENDS_PER_WRITER {
                        let session = if i % 3 == 0 { own } else { shared };
                        let payload = json!({"writer": writer, "i": i});
                        if i % 10 == 0 {
                            let batch = [
                                entry(EntryKind::ToolCall, payload.clone()),
                                entry(EntryKind::ToolResult, payload.clone()),
                            ];
                            for seq in store.append_many(session, &batch).expect("append many") {
                                written.push((session.clone(), seq, payload.clone()));
                            }
                        } else {
                            let seq = store
                                .append(session, &entry(EntryKind::Event, payload.clone()))
                                .expect("append");
                            written.push((session.clone(), seq, payload));
                        }
                    }
                    written
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|writer| writer.join().expect("writer thread"))
            .collect()
    });

    for session in std::iter::once(&shared).chain(&own) {
        let stored = all_entries(&setup, session);
        let mut returned: Vec<(u64, &Value)> = written
            .iter()
            .flatten()
            .filter(|(id, _, _)| id == session)
            .map(|(_, seq, payload)| (*seq, payload))
            .collect();
        returned.sort_by_key(|(seq, _)| *seq);
        let stored_pairs: Vec<(u64, &Value)> = stored
            .iter()
            .map(|entry| (entry.seq, &entry.payload))
            .collect();
        // Same seqs (so none duplicated or missing), each holding what its writer appended.
        assert_eq!(stored_pairs, returned);
        assert_eq!(seqs(&stored), (1..=stored.len() as u64).collect::<Vec<_>>());
    }
    let total: usize = written.iter().map(Vec::len).sum();
    assert_eq!(total, 2 * (APPENDS_PER_WRITER + APPENDS_PER_WRITER / 10));
}

#[test]
fn entry_kinds_serialize_as_their_stored_names() {
    for kind in EntryKind::ALL {
        assert_eq!(
            serde_json::to_value(kind).expect("serialize"),
            json!(kind.as_str())
        );
        assert_eq!(EntryKind::from_name(kind.as_str()), Some(kind));
    }
    assert_eq!(EntryKind::from_name("tool_calls"), None);
}

#[test]
fn the_data_dir_comes_from_the_environment_then_the_platform() {
    let platform = Some(PathBuf::from("/home/u/.local/share"));
    assert_eq!(
        resolve_data_dir(Some("/tmp/pen-data".into()), platform.clone()).expect("env"),
        PathBuf::from("/tmp/pen-data")
    );
    assert_eq!(
        resolve_data_dir(Some(OsString::new()), platform.clone()).expect("empty env"),
        PathBuf::from("/home/u/.local/share/pen")
    );
    assert_eq!(
        resolve_data_dir(None, platform).expect("platform"),
        PathBuf::from("/home/u/.local/share/pen")
    );
    assert!(matches!(
        resolve_data_dir(None, None),
        Err(SessionError::NoDataDir)
    ));
}

#[cfg(unix)]
#[test]
fn the_data_dir_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new().expect("temp dir");
    let data_dir = dir.path().join("a").join("pen");
    SessionStore::open(&data_dir).expect("open creates the directory");
    let mode = std::fs::metadata(&data_dir)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// The bundled SQLite is built with `.cargo/config.toml`'s LIBSQLITE3_FLAGS: without the
/// features pen never uses (they cost binary bytes and build time), with the JSON functions
/// the schema needs.
#[test]
fn the_bundled_sqlite_has_only_what_pen_uses() {
    let conn = Connection::open_in_memory().expect("an in-memory database");
    let options: BTreeSet<String> = conn
        .prepare("PRAGMA compile_options")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("read the options");
    for absent in [
        "ENABLE_FTS3",
        "ENABLE_FTS5",
        "ENABLE_RTREE",
        "ENABLE_DBSTAT_VTAB",
        "ENABLE_STAT4",
        "SOUNDEX",
    ] {
        assert!(!options.contains(absent), "{absent} in {options:?}");
    }
    for present in [
        "OMIT_LOAD_EXTENSION",
        "OMIT_DEPRECATED",
        "OMIT_SHARED_CACHE",
    ] {
        assert!(options.contains(present), "{present} not in {options:?}");
    }
    let json: String = conn
        .query_row("SELECT json_extract('{\"a\": \"b\"}', '$.a')", [], |row| {
            row.get(0)
        })
        .expect("the JSON functions");
    assert_eq!(json, "b");
}
