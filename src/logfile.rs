//! The daemon's log file, bounded on disk whatever is logged: one file a day (UTC) under the
//! data folder's `logs/`, `pen.log.YYYY-MM-DD`, of at most [`MAX_LOG_FILE_BYTES`]; a day's file
//! that would pass it is moved aside to `pen-previous.log` (replacing the one before) and a new
//! one started, and only the newest [`LOG_DAYS_KEPT`] days are kept. The logs therefore take at
//! most `(LOG_DAYS_KEPT + 1) × MAX_LOG_FILE_BYTES`, however fast something (an MCP server's
//! notification flood under `PEN_LOG=debug`) writes.
//!
//! Dependencies log at their own level ([`DEPENDENCY_LEVELS`]: rmcp logs every notification a
//! server sends, with its payload, at `info`) unless `PEN_LOG` names them.
//!
//! The current day's file keeps the name the editors open ("pen: Show Log", `:PenLog` open the
//! last `pen.log.*` by name), and the file moved aside sorts before it and outside that pattern.
//!
//! Two pens (VS Code's and Neovim's daemons) may write the same day's file (each appends whole
//! lines). A pen moves the file aside only while it is still the one this pen has open, so when
//! both reach the cap at once the second just opens the new file the first started.

use crate::limits::{LOG_DAYS_KEPT, MAX_LOG_FILE_BYTES};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The name every day's file begins with (`pen.log.YYYY-MM-DD`).
const PREFIX: &str = "pen.log.";

/// Where a day's file that reached the cap is moved.
pub const PREVIOUS_FILE: &str = "pen-previous.log";

/// The level of dependencies whose `info` lines carry what a peer sends (rmcp: each
/// notification with its payload), unless `PEN_LOG` names them (`PEN_LOG=debug,rmcp=debug`).
pub const DEPENDENCY_LEVELS: &[(&str, &str)] = &[("rmcp", "warn")];

/// The filter directives of the log: `PEN_LOG` (default `info`), then each dependency's
/// level it does not name.
pub fn directives(pen_log: Option<&str>) -> String {
    let pen_log = pen_log.map(str::trim).filter(|d| !d.is_empty());
    let mut directives = vec![pen_log.unwrap_or("info").to_string()];
    for (target, level) in DEPENDENCY_LEVELS {
        if !pen_log.is_some_and(|d| d.contains(target)) {
            directives.push(format!("{target}={level}"));
        }
    }
    directives.join(",")
}

/// The log, as a writer (`tracing_appender::non_blocking` runs it on its own thread).
pub struct LogFile {
    dir: PathBuf,
    /// The UTC day of the open file.
    day: String,
    file: File,
    max_bytes: u64,
}

impl LogFile {
    /// Opens today's file in `dir` (made if missing) with the cap [`MAX_LOG_FILE_BYTES`].
    pub fn open(dir: &Path) -> io::Result<LogFile> {
        LogFile::with_cap(dir, MAX_LOG_FILE_BYTES)
    }

    fn with_cap(dir: &Path, max_bytes: u64) -> io::Result<LogFile> {
        std::fs::create_dir_all(dir)?;
        let day = today();
        let file = append(&dir.join(format!("{PREFIX}{day}")))?;
        let log = LogFile {
            dir: dir.to_path_buf(),
            day,
            file,
            max_bytes,
        };
        log.forget_old_days();
        Ok(log)
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("{PREFIX}{}", self.day))
    }

    /// Moves the day's file aside, if it is still the one this pen writes, and starts anew.
    fn rotate(&mut self) -> io::Result<()> {
        let path = self.path();
        let open = self.file.metadata()?;
        let still_ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|named| (named.dev(), named.ino()) == (open.dev(), open.ino()));
        if still_ours {
            std::fs::rename(&path, self.dir.join(PREVIOUS_FILE))?;
        }
        self.file = append(&path)?;
        Ok(())
    }

    /// Deletes the day files beyond the newest [`LOG_DAYS_KEPT`] (their names sort by date).
    fn forget_old_days(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut days: Vec<String> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with(PREFIX))
            .collect();
        days.sort();
        let old = days.len().saturating_sub(LOG_DAYS_KEPT);
        for name in &days[..old] {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let day = today();
        if day != self.day {
            self.day = day;
            self.file = append(&self.path())?;
            self.forget_old_days();
        } else {
            // The size of the file as it is now (another pen may append to it too).
            let size = self.file.metadata()?.len();
            if size > 0 && size + buf.len() as u64 > self.max_bytes {
                self.rotate()?;
            }
        }
        self.file.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Today's date in UTC, `YYYY-MM-DD` (the day files were named by before the cap too).
fn today() -> String {
    time::OffsetDateTime::now_utc().date().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(dir: &Path) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| {
                let name = e.file_name().into_string().unwrap();
                (name, e.metadata().unwrap().len())
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn dependencies_log_at_their_level_unless_named() {
        assert_eq!(directives(None), "info,rmcp=warn");
        assert_eq!(directives(Some("debug")), "debug,rmcp=warn");
        assert_eq!(directives(Some("debug,rmcp=trace")), "debug,rmcp=trace");
        assert_eq!(directives(Some(" ")), "info,rmcp=warn");
    }

    #[test]
    fn the_log_is_capped_and_moved_aside_keeping_the_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::with_cap(dir.path(), 1_000).unwrap();
        for n in 0..1_000 {
            log.write_all(format!("line {n:04} of the flood\n").as_bytes())
                .unwrap();
        }
        let all = sizes(dir.path());
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all.iter().all(|(_, size)| *size <= 1_000), "{all:?}");
        // The day's file keeps the name the editors open, and holds the last line.
        let current = dir.path().join(format!("{PREFIX}{}", today()));
        let text = std::fs::read_to_string(current).unwrap();
        assert!(text.ends_with("line 0999 of the flood\n"), "{text}");
        let previous = std::fs::read_to_string(dir.path().join(PREVIOUS_FILE)).unwrap();
        assert!(previous.starts_with("line 09"), "{previous}");
        // The moved-aside file sorts before the day's file (the editors open the last one).
        assert!(PREVIOUS_FILE < format!("{PREFIX}{}", today()).as_str());
    }

    #[test]
    fn two_pens_at_the_cap_keep_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = LogFile::with_cap(dir.path(), 1_000).unwrap();
        let mut second = LogFile::with_cap(dir.path(), 1_000).unwrap();
        for n in 0..500 {
            first
                .write_all(format!("first {n:04}\n").as_bytes())
                .unwrap();
            second
                .write_all(format!("second {n:04}\n").as_bytes())
                .unwrap();
        }
        let all = sizes(dir.path());
        assert!(all.iter().all(|(_, size)| *size <= 1_000), "{all:?}");
        assert!(all.len() <= 2, "{all:?}");
        let current = dir.path().join(format!("{PREFIX}{}", today()));
        let text = std::fs::read_to_string(current).unwrap();
        assert!(text.ends_with("second 0499\n"), "{text}");
    }

    #[test]
    fn only_the_newest_days_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        for day in 1..=LOG_DAYS_KEPT + 3 {
            std::fs::write(
                dir.path().join(format!("{PREFIX}2001-01-{day:02}")),
                "old\n",
            )
            .unwrap();
        }
        std::fs::write(dir.path().join("other.txt"), "kept\n").unwrap();
        LogFile::open(dir.path()).unwrap();
        let names: Vec<String> = sizes(dir.path()).into_iter().map(|(n, _)| n).collect();
        let days: Vec<&String> = names.iter().filter(|n| n.starts_with(PREFIX)).collect();
        assert_eq!(days.len(), LOG_DAYS_KEPT, "{names:?}");
        assert!(days.iter().any(|n| n.ends_with(&today())));
        assert!(names.contains(&"other.txt".to_string()));
    }
}
