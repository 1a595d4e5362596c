//! The session store under `kill -9`: every entry a writer process saw committed is still there.
//!
//! The writer is this test binary run again with [`WRITER_DIR_ENV`] set and a filter naming
//! [`session_writer_process`], so no daemon or extra binary is needed.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use pen::session::{Entry, EntryKind, LeaseOwner, NewEntry, SessionStore};
use serde_json::json;

/// Set in the writer's environment to the data directory it writes to.
const WRITER_DIR_ENV: &str = "PEN_SESSION_WRITER_DIR";
/// Set in the writer's environment to the session it appends to.
const WRITER_SESSION_ENV: &str = "PEN_SESSION_WRITER_SESSION";
/// The writer's test name, as the test harness filters it.
const WRITER_TEST: &str = "suite::session::session_writer_process";
/// Committed entries the parent reads before it kills the writer.
const LINES_BEFORE_KILL: usize = 400;
/// A bound on the writer's loop, so that it ends by itself even if nothing ever kills it. A
/// writer whose parent died ends sooner, at its first write to the closed pipe.
const WRITER_MAX_CALLS: usize = 1_000_000;

/// The writer: when run by [`a_killed_writer_loses_no_committed_entry`], appends tool calls
/// and their results and prints `committed SEQ KIND CALL_ID` after each append returned. Run
/// as part of the suite, it does nothing.
#[test]
fn session_writer_process() {
    let (Some(dir), Some(session)) = (
        std::env::var_os(WRITER_DIR_ENV),
        std::env::var_os(WRITER_SESSION_ENV),
    ) else {
        return;
    };
    let session = session.into_string().expect("the session id is UTF-8");
    let store = SessionStore::open(Path::new(&dir)).expect("the writer opens the store");
    let mut stdout = std::io::stdout().lock();
    for i in 0..WRITER_MAX_CALLS {
        let call_id = format!("call-{i}");
        let message = json!({"text": "", "tool_calls": [{"id": call_id, "name": "pen_read", "arguments": "{}"}]});
        for kind in [
            EntryKind::AssistantMessage,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
        ] {
            let payload = match kind {
                EntryKind::AssistantMessage => message.clone(),
                _ => json!({"call_id": call_id, "i": i}),
            };
            let entry = NewEntry {
                kind,
                turn_id: Some(format!("turn-{}", i / 10)),
                payload,
            };
            let seq = store.append(&session, &entry).expect("append");
            // A closed pipe means the parent is gone: stop quietly.
            if writeln!(stdout, "committed {seq} {} {call_id}", kind.as_str()).is_err()
                || stdout.flush().is_err()
            {
                return;
            }
        }
    }
}

/// What the writer printed for one committed entry.
#[derive(Debug, PartialEq)]
struct Committed {
    seq: u64,
    kind: String,
    call_id: String,
}

fn parse_committed(line: &str) -> Option<Committed> {
    let mut words = line.strip_prefix("committed ")?.split(' ');
    let seq = words.next()?.parse().ok()?;
    let kind = words.next()?.to_owned();
    let call_id = words.next()?.to_owned();
    Some(Committed { seq, kind, call_id })
}

fn all_entries(store: &SessionStore, session: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .transcript(session, after, 500)
            .expect("transcript page");
        entries.extend(page.entries);
        match page.next_after_seq {
            Some(seq) => after = Some(seq),
            None => return entries,
        }
    }
}

#[test]
fn a_killed_writer_loses_no_committed_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let session = SessionStore::open(dir.path())
        .expect("open")
        .new_session(Some("kill -9"))
        .expect("session")
        .id;

    let mut writer = Command::new(std::env::current_exe().expect("the test binary"))
        .args([WRITER_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(WRITER_DIR_ENV, dir.path())
        .env(WRITER_SESSION_ENV, &session)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the writer");
    let mut stdout = BufReader::new(writer.stdout.take().expect("piped stdout"));
    let mut committed = Vec::new();
    let mut line = String::new();
    while committed.len() < LINES_BEFORE_KILL {
        line.clear();
        if stdout.read_line(&mut line).expect("read the writer") == 0 {
            let mut stderr = String::new();
            let _ = writer
                .stderr
                .take()
                .map(|mut err| err.read_to_string(&mut stderr));
            panic!(
                "the writer stopped after {} entries:\n{stderr}",
                committed.len()
            );
        }
        committed.extend(parse_committed(line.trim_end()));
    }
    // SIGKILL on Unix: no destructor, no SQLite shutdown, quite likely mid-transaction.
    writer.kill().expect("kill the writer");
    writer.wait().expect("reap the writer");
    // Lines already in the pipe were printed after their commit too; a torn last line is not.
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("drain the pipe");
    let mut lines = rest
        .split_inclusive('\n')
        .filter(|line| line.ends_with('\n'));
    committed.extend(
        lines
            .by_ref()
            .filter_map(|line| parse_committed(line.trim_end())),
    );

    let store = SessionStore::open(dir.path()).expect("reopen after the kill");
    let entries = all_entries(&store, &session);
    let seqs: Vec<u64> = entries.iter().map(|entry| entry.seq).collect();
    assert_eq!(
        seqs,
        (1..=entries.len() as u64).collect::<Vec<_>>(),
        "gapless"
    );
    assert!(entries.len() >= committed.len());
    for printed in &committed {
        let stored = entries
            .get((printed.seq - 1) as usize)
            .unwrap_or_else(|| panic!("committed entry {} is missing", printed.seq));
        let found = Committed {
            seq: stored.seq,
            kind: stored.kind.as_str().to_owned(),
            call_id: stored.payload["call_id"]
                .as_str()
                .or(stored.payload["tool_calls"][0]["id"].as_str())
                .unwrap_or("")
                .to_owned(),
        };
        assert_eq!(&found, printed);
    }

    // At most the last call was cut off from its result; recovery answers it, once.
    // (Its message, or its message and its `tool_call` entry, without the result.)
    let last_is_call = matches!(
        entries.last().map(|entry| entry.kind),
        Some(EntryKind::ToolCall | EntryKind::AssistantMessage)
    );
    // The writer is dead, so its session is free; recovery runs under the lease.
    let owner = LeaseOwner::this_process();
    store.acquire_lease(&session, owner).expect("lease");
    let recovered = store.recover_interrupted(&session, owner).expect("recover");
    assert_eq!(recovered.len(), usize::from(last_is_call));
    if last_is_call {
        let page = store
            .transcript(&session, Some(entries.len() as u64), 10)
            .expect("the recorded result");
        assert_eq!(page.entries.len(), 1);
        let last = &entries[entries.len() - 1];
        // A call whose `tool_call` entry committed may have started; one with only its
        // message cannot have.
        let (status, call_id) = match last.kind {
            EntryKind::ToolCall => ("interrupted", &last.payload["call_id"]),
            _ => ("not_executed", &last.payload["tool_calls"][0]["id"]),
        };
        assert_eq!(page.entries[0].payload["status"], status);
        assert_eq!(&page.entries[0].payload["call_id"], call_id);
    }
    assert!(
        store
            .recover_interrupted(&session, owner)
            .expect("again")
            .is_empty()
    );
    let next = store
        .append(
            &session,
            &NewEntry {
                kind: EntryKind::Event,
                turn_id: None,
                payload: json!({"after": "kill"}),
            },
        )
        .expect("append after recovery");
    assert_eq!(next, entries.len() as u64 + recovered.len() as u64 + 1);
}
