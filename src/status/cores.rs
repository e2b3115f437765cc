//! Work shared among the machine's cores, for the status's large jobs
//! (a starting controller's whole read, in shares; compressing a
//! rendering; making the pieces of a whole read): each
//! share on a thread of its own, the results joined in the shares' order.
//! And the threads the status's work runs on once the controller serves
//! ([`aside`]), which give way to the engine's.

/// How many threads the machine runs at once.
pub fn count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `work` of each of `shares`, each on a thread of its own, the results
/// joined in the shares' order. A panic in one is raised again here.
pub fn in_order<S: Send, U: Send>(shares: Vec<S>, work: impl Fn(S) -> Vec<U> + Sync) -> Vec<U> {
    let work = &work;
    std::thread::scope(|scope| {
        let workers: Vec<_> = shares
            .into_iter()
            .map(|share| scope.spawn(move || work(share)))
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// The threads status work that a request or the background refresh asks
/// for runs on: a blocking pool whose threads run at a lower priority
/// ([`crate::priority::OBSERVERS`]) than the engine's, so that readers of the status,
/// however many, take the CPU time provisioning leaves rather than slowing
/// it. The threads a job starts ([`in_order`]) keep that priority.
fn status_threads() -> &'static tokio::runtime::Handle {
    static THREADS: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    THREADS
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .thread_name("berth-status")
                .max_blocking_threads(count().max(2))
                .on_thread_start(|| crate::priority::give_way(crate::priority::OBSERVERS))
                .build()
                .expect("a runtime for the status's threads")
        })
        .handle()
}

/// `work` on the status's own threads: a blocking pool whose threads run
/// at [`crate::priority::OBSERVERS`], below the engine's.
///
/// # Errors
///
/// `work`'s, or [`crate::store::StoreError::Invariant`] if it panicked.
pub async fn aside<T, F>(work: F) -> Result<T, crate::store::StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
{
    status_threads().spawn_blocking(work).await.map_err(|e| {
        crate::store::StoreError::Invariant(if e.is_panic() {
            "the status's work panicked".into()
        } else {
            "the status's work was cancelled".into()
        })
    })?
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn status_work_runs_below_the_engines_priority() {
        let before = crate::priority::niceness();
        let (own, shares) = aside(|| {
            let shares = in_order(vec![(), ()], |()| vec![crate::priority::niceness()]);
            Ok((crate::priority::niceness(), shares))
        })
        .await
        .expect("status work");
        assert_eq!(own, crate::priority::OBSERVERS);
        assert_eq!(shares, vec![crate::priority::OBSERVERS; 2]);
        assert_eq!(
            crate::priority::niceness(),
            before,
            "the caller's thread is left alone"
        );
    }
}
