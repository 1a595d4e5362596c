//! The daemon's stdin and stdout, each on a thread of its own.
//!
//! tokio's `stdin()` and `stdout()` run every read and every write as a task on the blocking
//! pool. In `pen serve` those tasks race the tool calls' blocking work back to the pool, which
//! keeps adding threads (10 → 16 over 40,000 calls), each with its own malloc arena and stack:
//! the daemon's memory crept with the number of calls (issue 31). Here one thread reads stdin
//! and one writes stdout for the whole life of the daemon, so the blocking pool serves tool
//! calls alone, and a stalled client (a full pipe) holds one thread, never the pool.
//!
//! Every byte written is on its way to stdout once `poll_write` returns, and `poll_flush`
//! returns only when the writer thread has written and flushed everything before it: a frame
//! the transport flushed is out even if the process exits right after.

use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

/// How much one read of stdin takes at most.
const CHUNK: usize = 64 * 1024;

/// Chunks read ahead of the transport (and writes queued ahead of stdout): a few, so a client
/// that floods pen is held back by the pipe, not by pen's memory.
const QUEUED: usize = 4;

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
    let (tx, chunks) = mpsc::channel(QUEUED);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            loop {
                let mut chunk = vec![0; CHUNK];
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

enum Out {
    Bytes(Vec<u8>),
    /// Answered once everything queued before it is written and flushed.
    Flush(oneshot::Sender<io::Result<()>>),
}

/// The writing end of the daemon's stdout, written by its own thread.
pub struct Stdout {
    queue: PollSender<Out>,
    flushing: Option<oneshot::Receiver<io::Result<()>>>,
}

/// The daemon's stdout, written by a thread of its own from now on. The thread ends when this
/// is dropped, after writing what was queued.
pub fn stdout() -> io::Result<Stdout> {
    spawn_writer("pen-stdout", io::stdout())
}

fn spawn_writer<W: Write + Send + 'static>(name: &str, mut output: W) -> io::Result<Stdout> {
    let (queue, mut rx) = mpsc::channel(QUEUED);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            // The first failure (the client closed its end) answers every later flush.
            let mut failed: Option<io::ErrorKind> = None;
            while let Some(out) = rx.blocking_recv() {
                match out {
                    Out::Bytes(bytes) => {
                        if failed.is_none()
                            && let Err(e) = output.write_all(&bytes)
                        {
                            failed = Some(e.kind());
                        }
                    }
                    Out::Flush(done) => {
                        if failed.is_none()
                            && let Err(e) = output.flush()
                        {
                            failed = Some(e.kind());
                        }
                        let _ = done.send(match failed {
                            None => Ok(()),
                            Some(kind) => Err(io::Error::new(kind, "stdout failed")),
                        });
                    }
                }
            }
            let _ = output.flush();
        })?;
    Ok(Stdout {
        queue: PollSender::new(queue),
        flushing: None,
    })
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "stdout's writer thread is gone")
}

impl Stdout {
    fn poll_send(&mut self, cx: &mut Context<'_>, out: Out) -> Poll<io::Result<()>> {
        ready!(self.queue.poll_reserve(cx)).map_err(|_| closed())?;
        self.queue.send_item(out).map_err(|_| closed())?;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_send(cx, Out::Bytes(buf.to_vec())))?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.flushing.is_none() {
            ready!(this.queue.poll_reserve(cx)).map_err(|_| closed())?;
            let (done, answer) = oneshot::channel();
            this.queue
                .send_item(Out::Flush(done))
                .map_err(|_| closed())?;
            this.flushing = Some(answer);
        }
        let Some(answer) = this.flushing.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let result = ready!(Pin::new(answer).poll(cx));
        this.flushing = None;
        Poll::Ready(result.unwrap_or_else(|_| Err(closed())))
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
    async fn a_flush_returns_once_everything_before_it_is_written_and_flushed() {
        let recorder = Recorder::default();
        let mut stdout = spawn_writer("test-stdout", recorder.clone()).unwrap();
        for i in 0..100u8 {
            stdout.write_all(&[i; 1000]).await.unwrap();
        }
        stdout.flush().await.unwrap();
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
    async fn a_closed_stdout_fails_the_flush_after_it() {
        let mut stdout = spawn_writer("test-broken", Broken).unwrap();
        stdout.write_all(b"frame").await.unwrap();
        let err = stdout.flush().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
