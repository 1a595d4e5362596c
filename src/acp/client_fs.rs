//! The client's file system as pen's editor seam ([`tools::Editor`]): with `fs/read_text_file`
//! and `fs/write_text_file` offered, pen reads every file through the client (the unsaved
//! buffer of an open one, exactly) and writes edits through it, so the editor sees the change
//! and can undo it. The text goes both ways as it is: CRLF and a BOM stay.
//!
//! ACP has no document versions; each read is given a fresh one here, and an edit is applied
//! only to the text of the version it was planned against (the re-read that precedes every
//! write), so a buffer the owner changed since is refused as stale, as under `pen serve`.
//!
//! ACP does not say which files the client has open, so the cost is bounded instead: a file
//! over [`MAX_ACP_CLIENT_READ_BYTES`] on disk is read from the disk, and a search asks the
//! client only for the files this session has already read through it ([`KnownFiles`]), never
//! one request per file of the workspace.

use super::rpc::{CallError, Connection};
use super::wire::{ReadTextFileParams, ReadTextFileResponse, WriteTextFileParams};
use crate::documents::Snapshot;
use crate::limits::{ACP_CLIENT_FS_TIMEOUT, ACP_KEPT_CLIENT_READS, MAX_ACP_CLIENT_READ_BYTES};
use crate::tools::{self, Replacement};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

pub struct ClientFiles {
    connection: Arc<Connection>,
    runtime: tokio::runtime::Handle,
    session_id: String,
    next_version: AtomicI32,
    /// The newest reads, oldest first.
    reads: Mutex<Vec<(PathBuf, Snapshot)>>,
    /// Every file the client has answered a read of in this session.
    known: Mutex<HashSet<PathBuf>>,
}

impl ClientFiles {
    pub fn new(
        connection: Arc<Connection>,
        runtime: tokio::runtime::Handle,
        session_id: String,
    ) -> ClientFiles {
        ClientFiles {
            connection,
            runtime,
            session_id,
            next_version: AtomicI32::new(1),
            reads: Mutex::default(),
            known: Mutex::default(),
        }
    }

    /// Sends a request and waits for the answer, at most [`ACP_CLIENT_FS_TIMEOUT`]. Called from
    /// a tool's blocking thread (planning an edit too); `block_in_place` would hand a runtime
    /// thread over to the runtime's other work while it waits.
    fn call(
        &self,
        method: &str,
        params: &impl serde::Serialize,
    ) -> Result<serde_json::Value, String> {
        let request = self.connection.request(method, params);
        // The timer is made inside the runtime: a search's reader threads are not its own.
        let answer = tokio::task::block_in_place(|| {
            self.runtime
                .block_on(async { tokio::time::timeout(ACP_CLIENT_FS_TIMEOUT, request).await })
        });
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(CallError::Rejected(error))) => Err(error.message),
            Ok(Err(CallError::Gone)) => Err("the client is gone".into()),
            Err(_) => Err(format!(
                "the client did not answer {method} within {} s",
                ACP_CLIENT_FS_TIMEOUT.as_secs()
            )),
        }
    }

    fn lock_reads(&self) -> std::sync::MutexGuard<'_, Vec<(PathBuf, Snapshot)>> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl tools::Editor for ClientFiles {
    /// The client's text of the file: its buffer when open, else what it reads from disk. A
    /// file the client cannot read (missing, not text) is read from the disk by pen itself,
    /// which reports it as it would under `pen run`.
    fn snapshot(&self, path: &Path) -> Option<Snapshot> {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_ACP_CLIENT_READ_BYTES) {
            return None;
        }
        let params = ReadTextFileParams {
            session_id: self.session_id.clone(),
            path: path.to_str()?.to_string(),
        };
        let answer = self.call("fs/read_text_file", &params).and_then(|value| {
            serde_json::from_value::<ReadTextFileResponse>(value).map_err(|e| e.to_string())
        });
        let content = match answer {
            Ok(answer) => answer.content,
            Err(reason) => {
                tracing::debug!("fs/read_text_file {}: {reason}", path.display());
                return None;
            }
        };
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_path_buf());
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        let snapshot = Snapshot::new(version, &content);
        let mut reads = self.lock_reads();
        reads.retain(|(read, _)| read != path);
        if reads.len() >= ACP_KEPT_CLIENT_READS {
            reads.remove(0);
        }
        reads.push((path.to_path_buf(), snapshot.clone()));
        Some(snapshot)
    }

    fn apply(&self, path: &Path, version: i32, replacements: &[Replacement]) -> Result<(), String> {
        let snapshot = self
            .lock_reads()
            .iter()
            .find(|(read, snapshot)| read == path && snapshot.version == version)
            .map(|(_, snapshot)| snapshot.clone())
            .ok_or("the file was read again since this edit was planned")?;
        let content = replaced(&snapshot.text(), replacements)?;
        let params = WriteTextFileParams {
            session_id: self.session_id.clone(),
            path: path
                .to_str()
                .ok_or("the path is not UTF-8, which ACP cannot name")?
                .to_string(),
            content,
        };
        self.call("fs/write_text_file", &params)
            .map(|_| ())
            .map_err(|reason| format!("the client refused fs/write_text_file: {reason}"))
    }
}

/// The client's files as a search sees them: the files this session has read through the
/// client are searched as the client holds them (asked again, so exactly); every other file is
/// searched on the disk.
pub struct KnownFiles(pub Arc<ClientFiles>);

impl tools::Editor for KnownFiles {
    fn snapshot(&self, path: &Path) -> Option<Snapshot> {
        let known = self
            .0
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(path);
        if known { self.0.snapshot(path) } else { None }
    }

    fn apply(&self, path: &Path, version: i32, replacements: &[Replacement]) -> Result<(), String> {
        self.0.apply(path, version, replacements)
    }
}

/// `text` with `replacements` (byte ranges of `text`, not overlapping) made.
fn replaced(text: &str, replacements: &[Replacement]) -> Result<String, String> {
    let mut ordered: Vec<&Replacement> = replacements.iter().collect();
    ordered.sort_by_key(|r| r.range.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for replacement in ordered {
        let range = &replacement.range;
        if range.start < at
            || range.end < range.start
            || text.get(at..range.start).is_none()
            || text.get(range.clone()).is_none()
        {
            return Err(format!(
                "the edit's range {range:?} does not fit the {} bytes read",
                text.len()
            ));
        }
        out.push_str(&text[at..range.start]);
        out.push_str(&replacement.text);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Editor;
    use serde_json::{Value, json};

    /// A client that serves `buffers` to `fs/read_text_file` and records `fs/write_text_file`.
    fn client_files(
        buffers: std::collections::HashMap<String, String>,
    ) -> (Arc<ClientFiles>, Arc<Mutex<Vec<Value>>>) {
        let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let connection = Arc::new(Connection::new(lines_tx));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let (client, written) = (Arc::clone(&connection), Arc::clone(&writes));
        tokio::spawn(async move {
            while let Some(line) = lines_rx.recv().await {
                let request: Value = serde_json::from_str(&line).unwrap();
                let path = request["params"]["path"].as_str().unwrap_or_default();
                let answer = match request["method"].as_str() {
                    Some("fs/read_text_file") => match buffers.get(path) {
                        Some(text) => Ok(json!({"content": text})),
                        None => Err(crate::acp::rpc::RpcError::new(-32002, "not open")),
                    },
                    _ => {
                        written.lock().unwrap().push(request["params"].clone());
                        Ok(Value::Null)
                    }
                };
                client.resolve(&request["id"], answer);
            }
        });
        let files = ClientFiles::new(connection, tokio::runtime::Handle::current(), "s".into());
        (Arc::new(files), writes)
    }

    /// An edit lands through the client only over the text it was planned on; a file the
    /// client cannot read is left to the disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn edits_go_through_the_client_only_over_the_version_they_were_planned_on() {
        let buffers = [("/w/a.txt".to_string(), "one\r\ntwo\r\n".to_string())].into();
        let (files, writes) = client_files(buffers);
        let path = Path::new("/w/a.txt");
        let outcome = tokio::task::spawn_blocking(move || {
            assert!(files.snapshot(Path::new("/w/missing.txt")).is_none());
            let first = files.snapshot(path).unwrap();
            assert_eq!(first.text(), "one\r\ntwo\r\n");
            let second = files.snapshot(path).unwrap();
            assert_ne!(first.version, second.version);
            let edit = [replacement(5..8, "TWO")];
            let stale = files.apply(path, first.version, &edit);
            let applied = files.apply(path, second.version, &edit);
            (stale, applied)
        })
        .await
        .unwrap();
        assert!(outcome.0.is_err(), "an edit planned on an older read");
        assert_eq!(outcome.1, Ok(()));
        assert_eq!(
            *writes.lock().unwrap(),
            [json!({"sessionId": "s", "path": "/w/a.txt", "content": "one\r\nTWO\r\n"})]
        );
    }

    fn replacement(range: std::ops::Range<usize>, text: &str) -> Replacement {
        Replacement {
            range,
            text: text.into(),
        }
    }

    #[test]
    fn replacements_keep_every_byte_around_them() {
        let text = "\u{feff}a\r\nb\r\nc\r\n";
        let out = replaced(text, &[replacement(9..10, "C"), replacement(3..4, "A")]).unwrap();
        assert_eq!(out, "\u{feff}A\r\nb\r\nC\r\n");
        assert!(
            replaced(text, &[replacement(1..2, "x")]).is_err(),
            "inside the BOM"
        );
        assert!(
            replaced(text, &[replacement(3..40, "x")]).is_err(),
            "past the end"
        );
        assert!(
            replaced(text, &[replacement(3..6, "x"), replacement(4..5, "y")]).is_err(),
            "overlapping"
        );
    }
}
