//! The guardian: a small process that ends the job's process group when the wrapper dies
//! without doing it itself (killed with SIGKILL, or crashed).
//!
//! The job's own process gets SIGTERM as its parent dies (`child.rs`), but the rest of
//! its group (a shell's children, say) would run on, and a job that ignores SIGTERM
//! would too. So when the job has a group of its own, the wrapper forks, before any
//! thread of its own starts, a guardian that holds the read end of a pipe: the wrapper
//! writes the job's group id into it once the job runs, and one more byte once the job
//! and its group have ended. End of file without that byte means the wrapper is gone:
//! the guardian ends the group as the wrapper would have (`child::end_group`: SIGTERM,
//! then SIGKILL a second later) and exits. It is in a process group of its own, so a
//! signal to the wrapper's group does not end it before it has done its work; it never
//! outlives the wrapper by more than that second.

use std::io::{PipeWriter, Write};
use std::os::fd::{AsRawFd, RawFd};

use nix::errno::Errno;
use nix::sys::wait::waitpid;
use nix::unistd::{close, fork, read, setpgid, ForkResult, Pid};

use super::child::end_group;

/// The highest file descriptor the guardian closes: it keeps none of the wrapper's open
/// (its output above all, which whoever reads the wrapper's output waits on).
const CLOSE_BELOW: RawFd = 1024;

/// The wrapper's end of the guardian.
#[derive(Debug)]
pub struct Guardian {
    pid: Pid,
    tell: Option<PipeWriter>,
}

impl Guardian {
    /// Forks the guardian; `None` when it cannot be (the job still runs, and is still
    /// ended when the wrapper exits normally). Call it before the wrapper starts any
    /// thread: the fork copies the calling thread alone.
    pub fn start() -> Option<Guardian> {
        // Close-on-exec: the job never holds the wrapper's end open.
        let (listen, tell) = std::io::pipe().ok()?;
        // SAFETY: the child runs `guard` alone, which makes async-signal-safe system
        // calls only (setpgid, close, read, kill, nanosleep, _exit) and allocates
        // nothing, so the fork is sound even if another thread held a lock.
        #[allow(unsafe_code)]
        let forked = unsafe { fork() }.ok()?;
        match forked {
            ForkResult::Child => {
                // Its copy of the wrapper's end closed, or it would never see the end.
                let _ = close(tell.as_raw_fd());
                guard(listen.as_raw_fd())
            }
            ForkResult::Parent { child } => {
                drop(listen);
                Some(Guardian {
                    pid: child,
                    tell: Some(tell),
                })
            }
        }
    }

    /// The job runs with process group `pgid`.
    pub fn watch(&mut self, pgid: Pid) {
        if let Some(tell) = &mut self.tell {
            let _ = tell.write_all(&pgid.as_raw().to_le_bytes());
        }
    }
}

impl Drop for Guardian {
    /// The job and its group have ended (or never started): the guardian exits without
    /// a signal, and is reaped.
    fn drop(&mut self) {
        if let Some(mut tell) = self.tell.take() {
            let _ = tell.write_all(&[0]);
        }
        let _ = waitpid(self.pid, None);
    }
}

/// The guardian's life, in the forked child.
fn guard(listen: RawFd) -> ! {
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // Its command line is the wrapper's; `ps -o comm` tells them apart.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(c"snitch-guard");
    for fd in (0..CLOSE_BELOW).filter(|&fd| fd != listen) {
        let _ = close(fd);
    }
    let mut pgid = [0u8; 4];
    if !read_exact(listen, &mut pgid) {
        exit(); // the wrapper ended before the job ran
    }
    let mut done = [0u8; 1];
    if !read_exact(listen, &mut done) {
        // End of file: the wrapper is gone and the group may still run.
        end_group(Pid::from_raw(i32::from_le_bytes(pgid)));
    }
    exit()
}

/// Fills `buffer` from `fd`: `false` at end of file (or on an error).
fn read_exact(fd: RawFd, buffer: &mut [u8]) -> bool {
    let mut filled = 0;
    while filled < buffer.len() {
        match read(fd, &mut buffer[filled..]) {
            Ok(0) => return false,
            Ok(n) => filled += n,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Exits at once: no destructor or exit handler of the wrapper's runs in the guardian.
fn exit() -> ! {
    // SAFETY: `_exit` takes no pointer and is async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    }
}
