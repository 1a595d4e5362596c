//! What pen's command line shows on a terminal, in one place the interactive session reuses:
//! colour (none off a terminal or with `NO_COLOR`), call outcomes in words, a coloured diff,
//! the owner's answer read so that Ctrl-C (Stop) ends the wait at once, and the live line that
//! says how long the model, or a command, has been silent.

use crate::limits::LIVE_LINE_TICK;
use crate::transcript::CallOutcome;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether text is coloured: only on a terminal, and never when `NO_COLOR` is set to anything
/// (<https://no-color.org>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    colour: bool,
}

impl Style {
    /// The style for stderr, where pen's progress goes.
    pub fn for_stderr() -> Style {
        Style::for_output(std::io::stderr().is_terminal())
    }

    /// The style for stdout, where the management commands print.
    pub fn for_stdout() -> Style {
        Style::for_output(std::io::stdout().is_terminal())
    }

    fn for_output(on_terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            colour: on_terminal && !no_color,
        }
    }

    /// No colour at all.
    pub const fn plain() -> Style {
        Style { colour: false }
    }

    /// Coloured, whatever the output is (for tests).
    pub const fn coloured() -> Style {
        Style { colour: true }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    /// A call's outcome in words, green when it ran, red when it failed or was denied, yellow
    /// when it did not run or its effect is unknown.
    pub fn outcome(self, outcome: CallOutcome) -> String {
        let words = outcome_words(outcome);
        match outcome {
            CallOutcome::Done => self.green(words),
            CallOutcome::Error | CallOutcome::Denied => self.red(words),
            _ => self.yellow(words),
        }
    }

    /// A unified diff with its added lines green, its removed lines red and its hunk headers
    /// dim.
    pub fn diff(self, diff: &str) -> String {
        diff.lines()
            .map(|line| {
                if line.starts_with("+++") || line.starts_with("---") {
                    self.bold(line)
                } else if line.starts_with('+') {
                    self.green(line)
                } else if line.starts_with('-') {
                    self.red(line)
                } else if line.starts_with("@@") {
                    self.dim(line)
                } else {
                    line.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A call's outcome as a person reads it (the stored names, `not_executed`…, are for programs).
pub fn outcome_words(outcome: CallOutcome) -> &'static str {
    match outcome {
        CallOutcome::Done => "done",
        CallOutcome::Error => "failed",
        CallOutcome::Denied => "denied",
        CallOutcome::StaleAuthority => "not run: the approval no longer applied",
        CallOutcome::NotExecuted => "not run (stopped)",
        CallOutcome::Interrupted => "interrupted",
        CallOutcome::Unknown => "stopped while running: outcome unknown",
    }
}

/// Reads the owner's answer, one line, from stdin (a terminal) on a thread of its own: `None`
/// when `stop` fires first (Ctrl-C), or stdin ends. Whichever way the wait ends (also when the
/// caller drops this future), the thread is woken and stops reading, so no later line is taken
/// from the terminal and nothing keeps the process from exiting.
pub async fn read_answer(stop: CancellationToken) -> Option<String> {
    let (wake_reader, wake) = match wake_pipe() {
        Ok(pipe) => pipe,
        Err(e) => {
            tracing::warn!("cannot wait on the terminal: {e}");
            return None;
        }
    };
    let (sender, answer) = tokio::sync::oneshot::channel();
    let reader = std::thread::Builder::new()
        .name("pen-answer".into())
        .spawn(move || {
            let _ = sender.send(read_line_unless_woken(&wake_reader));
        });
    if reader.is_err() {
        return None;
    }
    // Dropped on every way out of this function, waking the reader.
    let _wake = wake;
    tokio::select! {
        line = answer => line.ok().flatten(),
        _ = stop.cancelled() => None,
    }
}

/// The write end of the wake pipe: writing (on drop) wakes the reader.
struct Wake(std::os::fd::OwnedFd);

impl Drop for Wake {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: one byte from a valid buffer to a descriptor this value owns.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    }
}

fn wake_pipe() -> std::io::Result<(std::os::fd::OwnedFd, Wake)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array it is given.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (reader, writer) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    Ok((reader, Wake(writer)))
}

/// One line from stdin, read straight from the descriptor (no buffer keeps what follows it);
/// `None` once `wake` is readable or stdin ends.
fn read_line_unless_woken(wake: &std::os::fd::OwnedFd) -> Option<String> {
    use std::os::fd::AsRawFd;
    let mut line = Vec::new();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds, for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        if fds[1].revents != 0 {
            return None;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let mut buf = [0u8; 1024];
        // SAFETY: reads at most `buf.len()` bytes into `buf`.
        let read = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(read) = usize::try_from(read) else {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        };
        if read == 0 {
            return None;
        }
        line.extend_from_slice(&buf[..read]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

/// The live line on stderr: while the model is silent (or a command runs) it says what pen is
/// waiting for and for how long, redrawn in place every [`LIVE_LINE_TICK`]; everything else
/// pen writes to the terminal goes through [`Live::print`] or [`Live::text`], which erase it
/// first. Off a terminal it shows nothing.
pub struct Live {
    enabled: bool,
    /// Whether stdout is the same terminal, so that its text and the line share the screen.
    stdout_on_terminal: bool,
    state: Mutex<LiveState>,
}

#[derive(Default)]
struct LiveState {
    waiting: Option<(String, Instant)>,
    shown: bool,
    /// The answer's text on stdout ended without a newline.
    mid_line: bool,
}

impl Live {
    /// The live line for stderr: shown only when stderr is a terminal.
    pub fn for_stderr() -> Arc<Live> {
        Arc::new(Live {
            enabled: std::io::stderr().is_terminal(),
            stdout_on_terminal: std::io::stdout().is_terminal(),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, pen waits: `what` says for what ("waiting for the model", "running TOOL").
    pub fn wait(&self, what: &str) {
        self.lock().waiting = Some((what.to_string(), Instant::now()));
    }

    /// Nothing is waited for (text is arriving, or the owner is being asked).
    pub fn quiet(&self) {
        let mut state = self.lock();
        state.waiting = None;
        self.erase(&mut state);
    }

    fn erase(&self, state: &mut LiveState) {
        if state.shown {
            eprint!("\r\x1b[2K");
            state.shown = false;
        }
    }

    /// Writes `line` to stderr on a line of its own (after the answer's unfinished line, if
    /// any), the live line erased first.
    pub fn print(&self, line: &str) {
        let mut state = self.lock();
        self.erase(&mut state);
        if state.mid_line && self.stdout_on_terminal {
            eprintln!();
            state.mid_line = false;
        }
        eprintln!("{line}");
    }

    /// Writes the answer's `text` to stdout, the live line erased first; `false` when stdout is
    /// closed.
    pub fn text(&self, text: &str) -> bool {
        let mut state = self.lock();
        state.waiting = None;
        self.erase(&mut state);
        if !text.is_empty() {
            state.mid_line = !text.ends_with('\n');
        }
        super::print_text(text)
    }

    /// Draws the line, if pen has been waiting a whole tick.
    fn draw(&self, style: Style) {
        let mut state = self.lock();
        let Some((what, since)) = state.waiting.clone() else {
            return;
        };
        let seconds = since.elapsed().as_secs();
        if seconds == 0 {
            return;
        }
        if state.mid_line && self.stdout_on_terminal {
            eprintln!();
            state.mid_line = false;
        }
        eprint!("\r\x1b[2K{}", style.dim(&format!("… {what} ({seconds}s)")));
        let _ = std::io::stderr().flush();
        state.shown = true;
    }

    /// Redraws the line every tick until `stop` fires; nothing when stderr is no terminal.
    pub fn run(self: &Arc<Self>, style: Style, stop: CancellationToken) {
        if !self.enabled {
            return;
        }
        let live = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(LIVE_LINE_TICK);
            loop {
                tokio::select! {
                    _ = ticks.tick() => live.draw(style),
                    _ = stop.cancelled() => {
                        live.quiet();
                        return;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_as_words_and_colour_only_when_asked() {
        for outcome in CallOutcome::ALL {
            assert!(!outcome_words(outcome).contains('_'), "{outcome:?}");
        }
        assert_eq!(
            Style::plain().outcome(CallOutcome::NotExecuted),
            "not run (stopped)"
        );
        assert_eq!(
            Style::coloured().outcome(CallOutcome::Done),
            "\x1b[32mdone\x1b[0m"
        );
        assert_eq!(
            Style::coloured().diff("@@ -1 +1 @@\n-old\n+new\n same"),
            "\x1b[2m@@ -1 +1 @@\x1b[0m\n\x1b[31m-old\x1b[0m\n\x1b[32m+new\x1b[0m\n same"
        );
        assert_eq!(Style::plain().diff("-a\n+b"), "-a\n+b");
    }
}
