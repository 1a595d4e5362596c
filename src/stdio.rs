//! The daemon's stdin and stdout, each on a thread of its own.
//!
//! tokio's `stdin()` and `stdout()` run every read and every write as a task on the blocking
//! pool. In `pen serve` those tasks race the tool calls' blocking work back to the pool, which
//! keeps adding threads (10 → 16 over 40,000 calls), each with its own malloc arena and stack:
//! the daemon's memory crept with the number of calls (issue 31). Here one thread reads stdin
//! and one writes stdout for the whole life of the daemon, so the blocking pool serves tool
//! calls alone, and a stalled client (a full pipe) holds one thread, never the pool.
//!
//! Every byte written is on its way to stdout once `poll_write` returns: the writer thread
//! writes and flushes it without a round trip per frame, and at exit [`Drained::wait`] waits
//! (boundedly) for it to write what was queued.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crate::limits::{STDIN_THREAD_CHUNK_BYTES, STDIO_QUEUED_CHUNKS};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

/// The reading end of the daemon's stdin, fed by its own thread.
pub struct Stdin {
    chunks: mpsc::Receiver<io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    taken: usize,
}

/// The daemon's stdin, read by a thread of its own from now on. The thread ends at end of
/// input or when this is dropped and its next read returns.
pub fn stdin() -> io::Result<Stdin> {
    spawn_reader("pen-stdin", io::stdin())
}

fn spawn_reader<R: Read + Send + 'static>(name: &str, mut input: R) -> io::Result<Stdin> {
    let (tx, chunks) = mpsc::channel(STDIO_QUEUED_CHUNKS);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            loop {
                let mut chunk = vec![0; STDIN_THREAD_CHUNK_BYTES];
                let sent = match input.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        chunk.truncate(n);
                        tx.blocking_send(Ok(chunk))
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        break;
                    }
                };
                if sent.is_err() {
                    break;
                }
            }
        })?;
    Ok(Stdin {
        chunks,
        chunk: Vec::new(),
        taken: 0,
    })
}

impl AsyncRead for Stdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.taken == this.chunk.len() {
            match ready!(this.chunks.poll_recv(cx)) {
                Some(Ok(chunk)) => {
                    this.chunk = chunk;
                    this.taken = 0;
                }
                Some(Err(e)) => return Poll::Ready(Err(e)),
                // End of input: a read of nothing.
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = buf.remaining().min(this.chunk.len() - this.taken);
        buf.put_slice(&this.chunk[this.taken..this.taken + n]);
        this.taken += n;
        Poll::Ready(Ok(()))
    }
}

/// The writing end of the daemon's stdout, written by its own thread.
pub struct Stdout {
    queue: PollSender<Vec<u8>>,
    failed: Arc<AtomicBool>,
}

/// Waits, at exit, for the writer thread to write what was queued.
pub struct Drained(std::sync::mpsc::Receiver<()>);

impl Drained {
    /// Blocks until everything queued is written (the [`Stdout`] must be dropped first), or
    /// `bound` passed: a client that stopped reading cannot hold pen open.
    pub fn wait(self, bound: Duration) {
        let _ = self.0.recv_timeout(bound);
    }
}

/// The daemon's stdout, written by a thread of its own from now on. The thread writes and
/// flushes each frame as it comes (flushing whenever nothing else is queued), and ends when the
/// [`Stdout`] is dropped, after writing what was queued; [`Drained::wait`] waits for that.
pub fn stdout() -> io::Result<(Stdout, Drained)> {
    spawn_writer("pen-stdout", io::stdout())
}

fn spawn_writer<W: Write + Send + 'static>(
    name: &str,
    mut output: W,
) -> io::Result<(Stdout, Drained)> {
    let (queue, mut rx) = mpsc::channel::<Vec<u8>>(STDIO_QUEUED_CHUNKS);
    let (done, drained) = std::sync::mpsc::channel();
    let failed = Arc::new(AtomicBool::new(false));
    let failure = Arc::clone(&failed);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            while let Some(bytes) = rx.blocking_recv() {
                if failure.load(Ordering::Relaxed) {
                    // The client closed its end: what is left is dropped, never waited on.
                    continue;
                }
                let written = output.write_all(&bytes).and_then(|()| {
                    if rx.is_empty() {
                        output.flush()
                    } else {
                        Ok(())
                    }
                });
                if written.is_err() {
                    failure.store(true, Ordering::Relaxed);
                }
            }
            let _ = output.flush();
            let _ = done.send(());
        })?;
    Ok((
        Stdout {
            queue: PollSender::new(queue),
            failed,
        },
        Drained(drained),
    ))
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed")
}

impl AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.failed.load(Ordering::Relaxed) {
            return Poll::Ready(Err(closed()));
        }
        ready!(self.queue.poll_reserve(cx)).map_err(|_| closed())?;
        self.queue.send_item(buf.to_vec()).map_err(|_| closed())?;
        Poll::Ready(Ok(buf.len()))
    }

    /// Queued bytes are the writer thread's: it writes and flushes them without being asked,
    /// so a flush only reports whether stdout has failed.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.failed.load(Ordering::Relaxed) {
            return Poll::Ready(Err(closed()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn what_is_read_is_the_input_in_order_then_end_of_input() {
        let input: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut stdin = spawn_reader("test-stdin", io::Cursor::new(input.clone())).unwrap();
        let mut read = Vec::new();
        stdin.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, input);
    }

    /// A writer that records what reached it and whether it was flushed after.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<(Vec<u8>, usize)>>);
    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            let mut state = self.0.lock().unwrap();
            state.1 = state.0.len();
            Ok(())
        }
    }

    #[tokio::test]
    async fn what_was_queued_is_written_and_flushed_once_the_writer_is_drained() {
        let recorder = Recorder::default();
        let (mut stdout, drained) = spawn_writer("test-stdout", recorder.clone()).unwrap();
        for i in 0..100u8 {
            stdout.write_all(&[i; 1000]).await.unwrap();
        }
        stdout.flush().await.unwrap();
        drop(stdout);
        drained.wait(Duration::from_secs(60));
        let state = recorder.0.lock().unwrap();
        assert_eq!(state.0.len(), 100_000);
        assert_eq!(state.1, 100_000, "flushed after the last byte");
        assert!(
            state
                .0
                .chunks(1000)
                .enumerate()
                .all(|(i, c)| c.iter().all(|&b| b as usize == i))
        );
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_closed_stdout_fails_the_writes_after_it() {
        let (mut stdout, _drained) = spawn_writer("test-broken", Broken).unwrap();
        stdout.write_all(b"frame").await.unwrap();
        // The thread's failure reaches a later write or flush; nothing here may block.
        let mut failed = None;
        for _ in 0..10_000 {
            if let Err(e) = stdout.write_all(b"frame").await {
                failed = Some(e);
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(failed.map(|e| e.kind()), Some(io::ErrorKind::BrokenPipe));
    }
}
