//! Thread priorities: the work that gives way to provisioning.
//!
//! On Linux a thread has a nice value of its own, and the threads it starts
//! inherit it. Work that only serves observers (the status's renderings for
//! its readers) or that must not hold up a starting controller (the
//! simulated cloud's ledger read) lowers its thread's priority here, so
//! that under contention the engine's threads keep the cores.

/// The nice value of the status's threads (see
/// [`crate::status::cores::aside`]): under contention, about a tenth of a
/// core for each of the engine's.
pub const OBSERVERS: libc::c_int = 10;

/// The nice value of a background read that a starting controller must
/// not wait on: the lowest priority, taking only what the rest leave.
pub const BACKGROUND: libc::c_int = 19;

/// Sets the calling thread's nice value to `niceness`. A refusal (a
/// sandbox that forbids it) is logged and the thread keeps its priority.
#[cfg(target_os = "linux")]
pub fn give_way(niceness: libc::c_int) {
    // SAFETY: gettid has no preconditions; setpriority changes the nice
    // value of the calling thread alone (Linux keeps one per thread) and
    // touches no memory.
    let done = unsafe {
        let thread = libc::gettid();
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::id_t::try_from(thread).unwrap_or_default(),
            niceness,
        )
    };
    if done != 0 {
        log::debug!(
            "a thread keeps its priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Elsewhere threads keep their priority.
#[cfg(not(target_os = "linux"))]
pub fn give_way(_niceness: libc::c_int) {}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
pub fn niceness() -> libc::c_int {
    // SAFETY: as above; getpriority reads the calling thread's value.
    unsafe {
        let thread = libc::gettid();
        libc::getpriority(
            libc::PRIO_PROCESS,
            libc::id_t::try_from(thread).unwrap_or_default(),
        )
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_gives_way_has_its_own_lower_priority_and_passes_it_on() {
        let before = niceness();
        let (own, child) = std::thread::spawn(|| {
            give_way(OBSERVERS);
            let child = std::thread::spawn(niceness).join().expect("child");
            (niceness(), child)
        })
        .join()
        .expect("thread");
        assert_eq!((own, child), (OBSERVERS, OBSERVERS));
        // The thread that started it keeps its own.
        assert_eq!(niceness(), before);
    }
}
