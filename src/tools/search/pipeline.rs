//! The search itself: the sorted walk, on a thread of its own (its folders listed ahead of it by
//! a pool, `listing`), hands entries in batches to the merge thread, which turns files into jobs for reader threads; they read (the editor's buffer
//! for open files), sniff, scan and prepare matches, and their outcomes come back to the one
//! in-order merge.

use super::kept::{Leftover, Log, Source, Taken};
use super::outcome::{Content, Done, Job, Outcome, SkipReason, Walked, prepare};
use super::page::{Collector, Page, Stop, resume_after};
use super::scan::{Matcher, scan};
use super::verdicts::{self, Verdict};
use super::walk::{Step, Walker};
use super::{LimitHit, Request};
use crate::limits::{
    SEARCH_BATCH_FILES, SEARCH_READ_AHEAD_BATCHES, SEARCH_WALK_AHEAD_BATCHES,
    SEARCH_WALK_BATCH_ENTRIES,
};
use crate::tools::versions::VersionKey;
use crate::tools::{ToolContext, ToolError};
use crate::workspace::{RootDir, Workspace};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What the readers share.
struct ReadPlan<'a> {
    /// The workspace root every file is opened beneath, following no link: the walk goes by
    /// path, so a folder swapped for a symlink mid-walk can show it names from elsewhere, but
    /// never a byte from outside the root.
    root_dir: RootDir,
    workspace: &'a Workspace,
    matcher: &'a Matcher,
    max_bytes: u64,
    binary_sniff_bytes: usize,
    max_shown: usize,
    excerpt_bytes: usize,
    /// Open documents are searched in their unsaved editor text.
    editor: Option<&'a dyn crate::tools::Editor>,
}

/// Reads one file (at most the size it had when opened), judges it, scans it and prepares its
/// matches. A disk file whose verdict is kept is not judged again, and not read at all unless it
/// is text.
fn read_and_scan(job: Job, buffer: &mut Vec<u8>, plan: &ReadPlan) -> Done {
    buffer.clear();
    let mut display = String::new();
    let sniff = plan.binary_sniff_bytes;
    let mut read = || -> io::Result<Outcome> {
        let snapshot = plan.editor.and_then(|editor| editor.snapshot(&job.path));
        let (size, verdict) = match snapshot {
            // An open document is searched as the editor has it, unsaved changes and all.
            Some(snapshot) => {
                let size = crate::bytes::ByteSource::len(&snapshot);
                if size > plan.max_bytes {
                    return Ok(Outcome::NotRead(SkipReason::TooLarge));
                }
                buffer.extend_from_slice(&crate::bytes::read_range(&snapshot, 0, size)?);
                (size, Verdict::of(buffer, sniff))
            }
            None => {
                let read_started = SystemTime::now();
                // The size comes from the open file, not the walk: a stat by path would cost
                // the walk, which is the one sequential part of a search, a second path lookup
                // per file.
                let (file, metadata) = plan.root_dir.open_file_no_links(&job.path)?;
                let size = metadata.len();
                if size > plan.max_bytes {
                    return Ok(Outcome::NotRead(SkipReason::TooLarge));
                }
                let key = VersionKey::of(&metadata);
                let known = verdicts::known(&key, sniff);
                if let Some(reason) = known.and_then(Verdict::skip_reason) {
                    // What reading it would have read: the head of a binary file, all of another.
                    let bytes_read = if reason == SkipReason::Binary {
                        size.min(sniff as u64)
                    } else {
                        size
                    };
                    return Ok(Outcome::Read {
                        size,
                        bytes_read,
                        content: Content::Skipped(reason),
                    });
                }
                let mut reader = (&file).take(size);
                buffer.reserve(usize::try_from(size).unwrap_or(0));
                if known.is_none() {
                    // Sniff the head first so that a large binary is not read whole.
                    (&mut reader).take(sniff as u64).read_to_end(buffer)?;
                    if memchr::memchr(0, buffer).is_some() {
                        let verdict = Verdict::Binary;
                        verdicts::learn((key, sniff), verdict, &file, read_started);
                        return Ok(Outcome::Read {
                            size,
                            bytes_read: buffer.len() as u64,
                            content: Content::Skipped(SkipReason::Binary),
                        });
                    }
                }
                reader.read_to_end(buffer)?;
                let verdict = match known {
                    Some(Verdict::Text) if verdicts::unchanged(&file, &key) => Verdict::Text,
                    _ => {
                        let verdict = Verdict::of(buffer, sniff);
                        verdicts::learn((key, sniff), verdict, &file, read_started);
                        verdict
                    }
                };
                (size, verdict)
            }
        };
        let content = match verdict.skip_reason() {
            Some(reason) => Content::Skipped(reason),
            None => match scan(
                buffer,
                plan.matcher,
                job.after_line,
                plan.max_shown,
                plan.excerpt_bytes,
            ) {
                Some(found) => {
                    if !found.is_empty() {
                        display = plan.workspace.display(&job.path);
                    }
                    Content::Text(prepare(found, &display))
                }
                // Only a file that changed under its key gets here.
                None => Content::Skipped(SkipReason::NonUtf8),
            },
        };
        Ok(Outcome::Read {
            size,
            bytes_read: buffer.len() as u64,
            content,
        })
    };
    let outcome = read().unwrap_or(Outcome::NotRead(SkipReason::Unreadable));
    Done {
        job,
        display,
        outcome,
    }
}

/// One reader thread: takes batches until the walk ends, skipping files once the search stopped.
fn reader(
    batches: &Mutex<Receiver<Vec<Job>>>,
    done: Sender<Vec<Done>>,
    stop: &AtomicBool,
    plan: &ReadPlan,
) {
    let mut buffer = Vec::new();
    loop {
        let batch = match batches.lock().map(|receiver| receiver.recv()) {
            Ok(Ok(batch)) => batch,
            _ => return,
        };
        let outcomes = batch
            .into_iter()
            .take_while(|_| !stop.load(Ordering::Relaxed))
            .map(|job| read_and_scan(job, &mut buffer, plan))
            .collect();
        if done.send(outcomes).is_err() {
            return;
        }
    }
}

/// The walk thread: takes entries in walk order, in batches, until the walk ends or the merge
/// asks it to stop, then stops the listing ahead of the walk (the page ended, or the walk did).
fn walk_ahead(source: &mut Source, batches: SyncSender<Vec<Taken>>, stop: &AtomicBool) {
    take_ahead(source, batches, stop);
    source.pause();
}

/// Every entry the walk thread takes reaches the merge: the merge takes what it did not use off
/// the channel once this thread has ended, and gives it back to the walk.
fn take_ahead(source: &mut Source, batches: SyncSender<Vec<Taken>>, stop: &AtomicBool) {
    let mut batch = Vec::with_capacity(SEARCH_WALK_BATCH_ENTRIES);
    while !stop.load(Ordering::Relaxed) {
        let Some(taken) = source.take() else {
            break;
        };
        batch.push(taken);
        if batch.len() >= SEARCH_WALK_BATCH_ENTRIES {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(SEARCH_WALK_BATCH_ENTRIES));
            if let Err(mpsc::SendError(full)) = batches.send(full) {
                source.put_back(full);
                return;
            }
        }
    }
    if let Err(mpsc::SendError(rest)) = batches.send(batch) {
        source.put_back(rest);
    }
}

/// Walks the search root in order (or resumes the walk kept for the cursor), hands files in
/// batches to the readers and merges their outcomes in walk order. Returns the page and what is
/// left of its walk, to keep for the page after it.
pub(super) fn search(
    request: &Request,
    ctx: &ToolContext,
    budget: usize,
    envelope_len: usize,
) -> Result<(Page, Leftover), ToolError> {
    let limits = &ctx.limits.search;
    let began = SystemTime::now();
    let mut source = Source::resume_or_fresh(request, limits.max_depth);
    let mut log = Log::default();
    let plan = ReadPlan {
        root_dir: ctx.workspace.root_dir(&request.workspace_root)?,
        workspace: ctx.workspace,
        matcher: &request.matcher,
        max_bytes: limits.max_bytes,
        binary_sniff_bytes: ctx.limits.binary_sniff_bytes,
        max_shown: limits.max_matches.saturating_add(1),
        excerpt_bytes: limits.excerpt_bytes,
        editor: ctx.editor,
    };
    let mut walker = Walker {
        request,
        workspace: ctx.workspace,
        max_entries: limits.max_entries as u64,
        walked: Walked::default(),
        index: 0,
        last: None,
    };
    let stop_readers = AtomicBool::new(false);
    let mut collector = Collector {
        limits: ctx.limits,
        workspace: ctx.workspace,
        after_text: request.after_text.as_deref(),
        budget,
        envelope_len,
        page: Page::default(),
        charged: 0,
        waiting: VecDeque::new(),
        next: 0,
        stop_readers: &stop_readers,
        stopped: false,
        error: None,
        merged_taken: 0,
    };
    let mut entry_limit = false;
    let mut walk_ended = false;
    let stop_walk = AtomicBool::new(false);
    let mut unused: Vec<Taken> = Vec::new();
    let readers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        let (entry_sender, entry_receiver) =
            mpsc::sync_channel::<Vec<Taken>>(SEARCH_WALK_AHEAD_BATCHES);
        let (walk_source, stop_walk) = (&mut source, &stop_walk);
        scope.spawn(move || walk_ahead(walk_source, entry_sender, stop_walk));
        let mut entries = Vec::new().into_iter();
        let (batch_sender, batch_receiver) =
            mpsc::sync_channel::<Vec<Job>>(SEARCH_READ_AHEAD_BATCHES);
        // Only the readers hold the receiver, so that if they all ended, a send fails instead
        // of waiting forever.
        let batch_receiver = Arc::new(Mutex::new(batch_receiver));
        let (done_sender, done_receiver) = mpsc::channel::<Vec<Done>>();
        for _ in 0..readers {
            let (batches, done) = (Arc::clone(&batch_receiver), done_sender.clone());
            let (stop_readers, plan) = (&stop_readers, &plan);
            scope.spawn(move || reader(&batches, done, stop_readers, plan));
        }
        drop((batch_receiver, done_sender));
        let mut batch = Vec::with_capacity(SEARCH_BATCH_FILES);
        loop {
            for done in done_receiver.try_iter().flatten() {
                collector.accept(done);
            }
            if collector.stopped {
                break;
            }
            log.forget_before(collector.merged_taken);
            let taken = match entries.next() {
                Some(taken) => taken,
                None => match entry_receiver.recv() {
                    Ok(batch) => {
                        entries = batch.into_iter();
                        continue;
                    }
                    Err(_) => {
                        walk_ended = true;
                        break;
                    }
                },
            };
            let step = walker.step(log.next_index(), &taken.entry, taken.too_deep);
            log.push(taken);
            match step {
                Step::Pass => {}
                Step::Unlisted(done) => collector.accept(done),
                Step::EntryLimit => {
                    entry_limit = true;
                    break;
                }
                Step::Read(job) => {
                    batch.push(job);
                    if batch.len() >= SEARCH_BATCH_FILES {
                        let full =
                            std::mem::replace(&mut batch, Vec::with_capacity(SEARCH_BATCH_FILES));
                        if batch_sender.send(full).is_err() {
                            break;
                        }
                    }
                }
            }
        }
        // What the walk took past where the page stopped goes back to it, in order, for the
        // page that resumes it.
        stop_walk.store(true, Ordering::Relaxed);
        unused.extend(entries);
        unused.extend(entry_receiver.iter().flatten());
        if !batch.is_empty() && !collector.stopped {
            // A failed send means every reader is gone; the merge below then ends early.
            let _ = batch_sender.send(batch);
        }
        drop(batch_sender);
        while !collector.stopped {
            match done_receiver.recv() {
                Ok(outcomes) => outcomes.into_iter().for_each(|done| collector.accept(done)),
                Err(_) => break,
            }
        }
        stop_readers.store(true, Ordering::Relaxed);
    });

    source.put_back(unused);
    if walk_ended {
        // The walk's last step may have left out deep entries after the last one yielded.
        walker.walked.too_deep += source.trailing_too_deep();
    }
    if let Some(error) = collector.error {
        return Err(error);
    }
    let mut page = collector.page;
    if page.stop.is_none() {
        page.walked_to(walker.walked);
        if entry_limit {
            let cursor = resume_after(
                ctx.workspace,
                walker.last.as_deref(),
                request.after_text.as_deref(),
            );
            page.stop = Some(Stop {
                limit: LimitHit::Entries,
                cursor,
            });
        } else if page.skipped.too_deep > 0 {
            page.stop = Some(Stop {
                limit: LimitHit::Depth,
                cursor: None,
            });
        }
    }
    Ok((page, Leftover { source, log, began }))
}
