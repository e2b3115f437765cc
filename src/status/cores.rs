//! Work shared among the machine's cores, for the status's large jobs
//! (a starting controller's whole read, in shares; compressing a
//! rendering; making the pieces of a whole read): each
//! share on a thread of its own, the results joined in the shares' order.

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
