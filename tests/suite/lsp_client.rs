//! A test client for `pen serve`: the real binary over piped stdio with Content-Length framing.
//!
//! A reader thread parses frames into a channel. `request` waits for its answer while keeping
//! every notification and answering server-to-client requests with a scripted handler, as an
//! editor would. Waits are bounded (a hung daemon fails the test instead of hanging it) but
//! never used as synchronisation.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// How long any single wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(60);

/// Answers a server-to-client request (method, params) with a result.
pub type RequestHandler = Box<dyn FnMut(&str, &Value) -> Value + Send>;

pub struct LspClient {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Option<Value>>,
    next_id: i64,
    /// Notifications received so far, in order.
    pub notifications: Vec<Value>,
    /// Server-to-client requests received so far, in order.
    pub server_requests: Vec<Value>,
    handler: RequestHandler,
}

/// Writes one framed message.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

impl LspClient {
    /// Starts `pen serve` with its data dir in `data_dir` and its working directory in `cwd`.
    pub fn spawn(data_dir: &Path, cwd: &Path, extra_env: &[(&str, &str)]) -> LspClient {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .arg("serve")
            .current_dir(cwd)
            .env("PEN_DATA_DIR", data_dir)
            .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in extra_env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn pen serve");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, incoming) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                match read_frame(&mut reader) {
                    Some(message) => {
                        if tx.send(Some(message)).is_err() {
                            return;
                        }
                    }
                    None => {
                        let _ = tx.send(None);
                        return;
                    }
                }
            }
        });
        LspClient {
            child,
            stdin,
            incoming,
            next_id: 1,
            notifications: Vec::new(),
            server_requests: Vec::new(),
            handler: Box::new(|_, _| Value::Null),
        }
    }

    /// Sets how server-to-client requests are answered.
    pub fn on_request(&mut self, handler: impl FnMut(&str, &Value) -> Value + Send + 'static) {
        self.handler = Box::new(handler);
    }

    /// `initialize` + `initialized` with a root folder and the offered position encodings.
    pub fn initialize(&mut self, root: &Path, encodings: &[&str]) -> Value {
        let uri = file_uri(root);
        let result = self.request(
            "initialize",
            json!({
                "processId": null,
                "rootUri": uri,
                "workspaceFolders": [{"uri": uri, "name": "root"}],
                "capabilities": {
                    "general": {"positionEncodings": encodings},
                    "window": {"workDoneProgress": true},
                    "workspace": {"applyEdit": true, "workspaceFolders": true}
                }
            }),
        );
        self.notify("initialized", json!({}));
        result
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write");
        stdin.flush().expect("flush");
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&frame(body.to_string().as_bytes()));
    }

    /// Sends a request and returns the whole response object (`result` or `error`).
    pub fn request_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&frame(body.to_string().as_bytes()));
        self.wait_for_response(&json!(id))
    }

    /// Sends a request and returns its result; panics on an error response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let response = self.request_raw(method, params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}"),
        }
    }

    /// `pen/newSession`: the new session's id.
    pub fn new_session(&mut self) -> String {
        self.request("pen/newSession", json!({}))["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string()
    }

    /// `pen/prompt`: runs one turn and returns its answer.
    pub fn prompt(&mut self, session: &str, text: &str) -> Value {
        self.request("pen/prompt", json!({"sessionId": session, "text": text}))
    }

    /// `pen/getTranscript`: the session's first 500 entries.
    pub fn transcript(&mut self, session: &str) -> Vec<Value> {
        self.request(
            "pen/getTranscript",
            json!({"sessionId": session, "limit": 500}),
        )["entries"]
            .as_array()
            .expect("entries")
            .clone()
    }

    /// Waits for the response with `id`, handling everything that arrives before it.
    pub fn wait_for_response(&mut self, id: &Value) -> Value {
        loop {
            let message = self
                .next_message()
                .expect("pen serve closed stdout before answering");
            if message.get("method").is_none() && message.get("id") == Some(id) {
                return message;
            }
            self.dispatch(message);
        }
    }

    /// The next message from the daemon, or `None` when it closed stdout.
    pub fn next_message(&mut self) -> Option<Value> {
        match self.incoming.recv_timeout(WAIT) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => panic!("pen serve sent nothing for {WAIT:?}"),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Sends a request without waiting for its answer; returns its id for `wait_for_response`.
    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&frame(body.to_string().as_bytes()));
        json!(id)
    }

    /// Handles messages until one matches `wanted` (which sees every message before it is
    /// dispatched); returns that message. A matching server request is not answered.
    pub fn wait_for(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let message = self.next_message().expect("pen serve closed stdout");
            if wanted(&message) {
                if message.get("id").is_none() {
                    self.notifications.push(message.clone());
                }
                return message;
            }
            self.dispatch(message);
        }
    }

    /// Records notifications and answers server requests; other messages are returned to
    /// the caller's loop by being ignored here.
    fn dispatch(&mut self, message: Value) {
        let Some(method) = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return;
        };
        match message.get("id") {
            Some(id) => {
                let id = id.clone();
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                self.server_requests.push(message);
                let result = (self.handler)(&method, &params);
                let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
                self.send_raw(&frame(body.to_string().as_bytes()));
            }
            None => self.notifications.push(message),
        }
    }

    /// Closes stdin and waits for the daemon to exit; returns its exit code.
    pub fn close(mut self) -> Option<i32> {
        self.stdin.take();
        // Drain so the daemon never blocks on a full pipe while exiting.
        while self.next_message().is_some() {}
        self.child.wait().expect("wait").code()
    }
}

impl LspClient {
    /// The daemon's process id (the daemon benchmark reads its memory).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        Some(self.child.id())
    }

    /// Kills the daemon with SIGKILL, as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LspClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_frame(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = value.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

/// The `file://` URI of a path (whose parent exists).
pub fn file_uri(path: &Path) -> String {
    let path = match path.canonicalize() {
        Ok(path) => path,
        Err(_) => {
            let parent = path
                .parent()
                .expect("parent")
                .canonicalize()
                .expect("canonical parent");
            parent.join(path.file_name().expect("file name"))
        }
    };
    let mut uri = String::from("file://");
    for byte in path.to_string_lossy().bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(byte as char)
            }
            _ => uri.push_str(&format!("%{byte:02X}")),
        }
    }
    uri
}
