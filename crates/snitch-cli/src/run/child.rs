//! The job: spawned directly (no shell), its output passed through as it comes while a
//! bounded tail is kept, signals forwarded, a `--timeout` enforced, and nothing of it left
//! running when the wrapper exits, even killed with SIGKILL (its parent-death signal, here,
//! and the guardian, `guard.rs`).

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use super::guard::Guardian;
use super::output::Tail;
use super::{NOT_EXECUTABLE, NOT_FOUND, TIMED_OUT};

/// How the job is run.
pub struct JobSpec<'a> {
    pub command: &'a [String],
    pub run_id: &'a str,
    /// The job gets a process group of its own (stdin is not a terminal): signals go to
    /// the whole group, and what is left of it is ended with the wrapper.
    pub own_group: bool,
    pub quiet: bool,
    pub tail_limit: usize,
    pub timeout: Option<Duration>,
    pub kill_after: Duration,
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Exited(u8),
    /// Killed by a signal: its name and number.
    Signalled(String, i32),
    /// `--timeout` ended it.
    TimedOut,
    NotFound(String),
    NotExecutable(String),
}

/// The job's end and the tail of what it printed.
#[derive(Debug)]
pub struct Outcome {
    pub status: Status,
    tail: Tail,
}

impl Outcome {
    /// The wrapper's exit status: the job's own; 128+n for signal n; 124, 126, 127.
    pub fn exit_code(&self) -> u8 {
        match &self.status {
            Status::Exited(n) => *n,
            Status::Signalled(_, n) => u8::try_from(128 + n).unwrap_or(255),
            Status::TimedOut => TIMED_OUT,
            Status::NotFound(_) => NOT_FOUND,
            Status::NotExecutable(_) => NOT_EXECUTABLE,
        }
    }

    pub fn timed_out(&self) -> bool {
        self.status == Status::TimedOut
    }

    /// The output's tail as valid UTF-8 of at most `limit` bytes, with a notice when
    /// earlier output was cut.
    pub fn tail_text(&self, limit: usize) -> String {
        self.tail.text(limit)
    }

    /// The last non-blank line of the output, if any.
    pub fn last_line(&self) -> Option<String> {
        self.tail.last_line()
    }
}

/// The signals the wrapper forwards to the job.
const FORWARDED: [i32; 6] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Runs the job to its end. `guardian` (with `own_group`) ends the job's group if the
/// wrapper is killed before it does.
pub fn run_job(spec: &JobSpec, mut guardian: Option<Guardian>) -> Outcome {
    let tail = Tail::new(spec.tail_limit);
    let Some((program, args)) = spec.command.split_first() else {
        return Outcome {
            status: Status::NotFound("no command".into()),
            tail,
        };
    };
    // Registered before the job starts, so none that arrives meanwhile ends the wrapper
    // with the job still running.
    let mut signals = Signals::new(FORWARDED).ok();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("SNITCH_RUN_ID", spec.run_id)
        // The job never sees the token.
        .env_remove("SNITCH_TOKEN");
    if spec.own_group {
        command.process_group(0);
    }
    parent_death_signal(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let status = match e.kind() {
                io::ErrorKind::NotFound => Status::NotFound(format!("{program}: {e}")),
                _ => Status::NotExecutable(format!("{program}: {e}")),
            };
            eprintln!("snitch run: cannot run {program}: {e}");
            return Outcome { status, tail };
        }
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    if let (true, Some(guardian)) = (spec.own_group, guardian.as_mut()) {
        guardian.watch(pid);
    }
    let send = {
        let own_group = spec.own_group;
        move |signal: Signal| {
            let _ = if own_group {
                killpg(pid, signal)
            } else {
                kill(pid, signal)
            };
        }
    };

    // Output: copied as it comes, the tail kept.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let readers = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    let mut copying = 0;
    for (n, reader) in readers.into_iter().enumerate() {
        let Some(reader) = reader else { continue };
        copying += 1;
        let tail = tail.clone();
        let done = done_tx.clone();
        let quiet = spec.quiet;
        thread::spawn(move || {
            copy(reader, n == 0, quiet, &tail);
            let _ = done.send(());
        });
    }
    drop(done_tx);

    // Signals sent to the wrapper reach the job: the whole group when it has one; on a
    // terminal (the job in the foreground group already gets what the terminal sends)
    // only SIGTERM and SIGHUP.
    let forwarding = signals.as_ref().map(|s| s.handle());
    if let Some(mut signals) = signals.take() {
        let own_group = spec.own_group;
        thread::spawn(move || {
            for raw in signals.forever() {
                if !own_group && raw != SIGTERM && raw != SIGHUP {
                    continue;
                }
                if let Ok(signal) = Signal::try_from(raw) {
                    send(signal);
                }
            }
        });
    }

    // `--timeout`: TERM at the time, KILL after the grace.
    let timed_out = Arc::new(AtomicBool::new(false));
    let (ended_tx, ended_rx) = mpsc::channel::<()>();
    if let Some(timeout) = spec.timeout {
        let timed_out = timed_out.clone();
        let kill_after = spec.kill_after;
        thread::spawn(move || {
            if ended_rx.recv_timeout(timeout) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            timed_out.store(true, Ordering::SeqCst);
            eprintln!("snitch run: the job ran past --timeout; sending SIGTERM");
            send(Signal::SIGTERM);
            if ended_rx.recv_timeout(kill_after) == Err(mpsc::RecvTimeoutError::Timeout) {
                eprintln!("snitch run: the job is still running; sending SIGKILL");
                send(Signal::SIGKILL);
            }
        });
    }

    let waited = child.wait();
    drop(ended_tx);
    if spec.own_group {
        end_group(pid);
    }
    // The group has ended: the guardian exits without a signal.
    drop(guardian);
    // The pipes close once every process holding them is gone; a descendant that
    // escaped the group may hold them open: the tail is what came until then.
    for _ in 0..copying {
        if done_rx.recv_timeout(Duration::from_secs(2)).is_err() {
            break;
        }
    }
    if let Some(handle) = forwarding {
        handle.close();
    }
    let status = match waited {
        _ if timed_out.load(Ordering::SeqCst) => Status::TimedOut,
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Status::Exited(u8::try_from(code & 0xff).unwrap_or(255)),
            (None, Some(n)) => Status::Signalled(
                Signal::try_from(n).map_or_else(|_| format!("signal {n}"), |s| s.to_string()),
                n,
            ),
            (None, None) => Status::Exited(255),
        },
        Err(e) => {
            eprintln!("snitch run: lost the job: {e}");
            Status::Exited(255)
        }
    };
    Outcome { status, tail }
}

/// The job gets SIGTERM when the wrapper dies, even by SIGKILL, which it cannot forward
/// (Linux's `PR_SET_PDEATHSIG`, set between fork and exec). It reaches the job's own
/// process only; the rest of its group is the guardian's (`guard.rs`). The "parent" is
/// the thread that spawns the job: `run_job` runs on the main thread, which lives as long
/// as the wrapper. Set-user-ID programs lose it at exec.
#[cfg(target_os = "linux")]
fn parent_death_signal(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: it makes two system calls (prctl, getppid) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
            // The wrapper died before the signal was set: nothing would send it, so the
            // job does not start.
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere there is no parent-death signal: the guardian alone ends the job.
#[cfg(not(target_os = "linux"))]
fn parent_death_signal(_: &mut Command) {}

/// Ends what is left of the job's process group: SIGTERM, then SIGKILL to whatever
/// still runs a second later. (The guardian calls it in a forked process: it must make
/// system calls only, and allocate nothing.)
pub fn end_group(pgid: Pid) {
    if killpg(pgid, None::<Signal>).is_err() {
        return; // no process left in it
    }
    let _ = killpg(pgid, Signal::SIGTERM);
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(50));
        if killpg(pgid, None::<Signal>).is_err() {
            return;
        }
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// Copies one of the job's streams to ours as it comes (unless `quiet`), keeping the
/// tail. Reads in small chunks: memory stays bounded whatever the job prints.
fn copy(mut from: Box<dyn Read + Send>, stdout: bool, quiet: bool, tail: &Tail) {
    let mut buffer = [0u8; 8192];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let chunk = &buffer[..n];
        if !quiet {
            // A closed terminal or pipe of ours must not stop the job: the output is
            // still read (and kept) so the job never blocks on a full pipe.
            let _ = if stdout {
                let mut out = io::stdout().lock();
                out.write_all(chunk).and_then(|()| out.flush())
            } else {
                io::stderr().lock().write_all(chunk)
            };
        }
        tail.push(chunk);
    }
}
