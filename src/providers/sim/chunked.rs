//! A list that grows a chunk at a time: the ledger's records.
//!
//! A `Vec` that outgrows its array moves every item to a larger one, and
//! holds both for as long as the move takes. With a million ledger records
//! (about 230 bytes each), each such move held two arrays of some 200 MB at
//! once; in a million-machine deploy those moments were the controller's
//! highest memory. A [`Chunked`] list never moves what it holds to grow:
//! it adds a chunk of [`CHUNK`] items.
//!
//! # Guarantees
//!
//! - Pushing never moves an item already held.
//! - The list made from a `Vec` ([`Chunked::from_vec`]) keeps that `Vec`'s
//!   array as its first chunk: a million records read back are not moved
//!   into a second list while the first is still held.
//! - Items are in the order they were pushed or inserted, as in a `Vec`.

use std::ops::{Index, IndexMut};

/// The items each chunk after the first holds.
pub(super) const CHUNK: usize = 4096;

/// A list in chunks: the first of any length, each after it of [`CHUNK`]
/// items, but the last, which holds 1 to [`CHUNK`].
pub(super) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Chunked<T> {
    /// A list of `first`'s items, in its array.
    pub fn from_vec(first: Vec<T>) -> Chunked<T> {
        Chunked {
            len: first.len(),
            chunks: vec![first],
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The chunk and the place in it of item `at` (`at` < `len`).
    fn locate(&self, at: usize) -> (usize, usize) {
        let first = self.chunks[0].len();
        match at.checked_sub(first) {
            None => (0, at),
            Some(after) => (1 + after / CHUNK, after % CHUNK),
        }
    }

    pub fn get(&self, at: usize) -> Option<&T> {
        if at >= self.len {
            return None;
        }
        let (chunk, place) = self.locate(at);
        self.chunks[chunk].get(place)
    }

    pub fn get_mut(&mut self, at: usize) -> Option<&mut T> {
        if at >= self.len {
            return None;
        }
        let (chunk, place) = self.locate(at);
        self.chunks[chunk].get_mut(place)
    }

    pub fn last(&self) -> Option<&T> {
        self.get(self.len.checked_sub(1)?)
    }

    /// Adds `item` at the end, in the last chunk or a new one.
    pub fn push(&mut self, item: T) {
        let after_first = self.chunks.len() > 1;
        match self.chunks.last_mut() {
            Some(last) if after_first && last.len() < CHUNK => last.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// Puts `item` at `at`, after the items before it, moving the items
    /// after it one place along (each full chunk hands its last item to
    /// the next).
    ///
    /// # Panics
    ///
    /// When `at` is beyond the end.
    pub fn insert(&mut self, at: usize, item: T) {
        assert!(at <= self.len, "insert at {at} in a list of {}", self.len);
        if at == self.len {
            return self.push(item);
        }
        let (mut chunk, mut place) = self.locate(at);
        let mut item = item;
        self.len += 1;
        loop {
            let held = &mut self.chunks[chunk];
            if chunk == 0 || held.len() < CHUNK {
                held.insert(place, item);
                return;
            }
            let carried = held.pop().expect("a full chunk");
            held.insert(place, item);
            item = carried;
            chunk += 1;
            place = 0;
            if chunk == self.chunks.len() {
                self.chunks.push(Vec::with_capacity(CHUNK));
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// The place of the first item for which `before` is false, the items
    /// being those for which it is true and then the others (as
    /// [`slice::partition_point`]).
    pub fn partition_point(&self, before: impl Fn(&T) -> bool) -> usize {
        let (mut low, mut high) = (0, self.len);
        while low < high {
            let middle = low + (high - low) / 2;
            if before(&self[middle]) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// Item `at`, to change, with the item before it, if any.
    pub fn with_previous_mut(&mut self, at: usize) -> Option<(Option<&T>, &mut T)> {
        if at >= self.len {
            return None;
        }
        let (chunk, place) = self.locate(at);
        if place > 0 {
            let (before, from) = self.chunks[chunk].split_at_mut(place);
            return Some((before.last(), &mut from[0]));
        }
        let (before, from) = self.chunks.split_at_mut(chunk);
        let previous = before.iter().rev().find_map(|c| c.last());
        Some((previous, &mut from[0][0]))
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, at: usize) -> &T {
        match self.get(at) {
            Some(item) => item,
            None => panic!("item {at} of a list of {}", self.len),
        }
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, at: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(at) {
            Some(item) => item,
            None => panic!("item {at} of a list of {len}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pushing_never_moves_an_item_held() {
        let mut list = Chunked::from_vec((0..10u64).collect());
        let first: *const u64 = &list[3];
        list.push(10);
        let pushed: *const u64 = &list[10];
        for n in 11..(3 * CHUNK as u64) {
            list.push(n);
        }
        assert!(std::ptr::eq(first, &list[3]));
        assert!(std::ptr::eq(pushed, &list[10]));
        // No array grew (a grown array is a moved one, wherever the
        // allocator put it).
        assert_eq!(list.chunks[0].capacity(), 10);
        assert!(list.chunks[1..].iter().all(|c| c.capacity() == CHUNK));
        assert_eq!(list.len(), 3 * CHUNK);
        assert!(list.iter().copied().eq(0..(3 * CHUNK as u64)));
    }

    #[test]
    fn an_empty_first_chunk_is_passed_over() {
        let mut list = Chunked::from_vec(Vec::new());
        assert!(list.last().is_none());
        assert!(list.with_previous_mut(0).is_none());
        list.push(1);
        list.push(2);
        assert_eq!(list.last(), Some(&2));
        let (previous, item) = list.with_previous_mut(0).unwrap();
        assert_eq!((previous, *item), (None, 1));
        let (previous, item) = list.with_previous_mut(1).unwrap();
        assert_eq!((previous, *item), (Some(&1), 2));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(u32),
        /// At a place, as a share of the length (0 to 1000).
        Insert(u32, u32),
        Set(u32, u32),
    }

    fn any_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => any::<u32>().prop_map(Op::Push),
            1 => (0u32..=1000, any::<u32>()).prop_map(|(at, n)| Op::Insert(at, n)),
            1 => (0u32..=1000, any::<u32>()).prop_map(|(at, n)| Op::Set(at, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_chunked_list_holds_what_a_vec_holds(
            first in prop::collection::vec(any::<u32>(), 0..3000),
            ops in prop::collection::vec(any_op(), 0..12000),
        ) {
            let mut list = Chunked::from_vec(first.clone());
            let mut model = first;
            for op in ops {
                match op {
                    Op::Push(n) => {
                        list.push(n);
                        model.push(n);
                    }
                    Op::Insert(share, n) => {
                        let at = model.len() * share as usize / 1000;
                        list.insert(at, n);
                        model.insert(at, n);
                    }
                    Op::Set(share, n) if !model.is_empty() => {
                        let at = (model.len() - 1) * share as usize / 1000;
                        list[at] = n;
                        model[at] = n;
                    }
                    Op::Set(..) => {}
                }
            }
            prop_assert_eq!(list.len(), model.len());
            prop_assert!(list.iter().eq(model.iter()));
            prop_assert_eq!(list.last(), model.last());
            for at in [0, model.len() / 3, model.len() / 2, model.len().saturating_sub(1)] {
                prop_assert_eq!(list.get(at), model.get(at));
                let previous = at.checked_sub(1).and_then(|p| model.get(p)).copied();
                let pair = list.with_previous_mut(at).map(|(p, item)| (p.copied(), *item));
                prop_assert_eq!(pair, model.get(at).map(|item| (previous, *item)));
            }
            prop_assert_eq!(list.get(model.len()), None);
            // Sorted, the list is searched as a slice is.
            let mut sorted = Chunked::from_vec(Vec::new());
            let mut in_order = model.clone();
            in_order.sort_unstable();
            for n in &in_order {
                sorted.push(*n);
            }
            let middle = in_order.get(in_order.len() / 2).copied().unwrap_or(0);
            for bound in [0, middle, u32::MAX / 2, u32::MAX] {
                prop_assert_eq!(
                    sorted.partition_point(|n| *n < bound),
                    in_order.partition_point(|n| *n < bound)
                );
            }
        }
    }
}
