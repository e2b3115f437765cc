//! The whole status rendered in segments, so that the rendering of a new
//! revision keeps (and shares) the segments that did not change, with their
//! CRC-32 and their deflated bytes, and a gzip of it compresses only what
//! changed.
//!
//! A rendering is cut where the document says it may be
//! ([`Segmenter::cut`]): before each run of [`BLOCK`] machines, before each
//! application, and before each run of [`BLOCK`] of an application's units;
//! each cut names the segment it starts ([`Label`]). Making the next
//! rendering, the document writes each segment into a scratch buffer, and
//! the segmenter keeps the previous rendering's segment of the same label
//! when its bytes are the same (compared whole, so a segment is reused only
//! when it is exactly what would be written), or keeps the new bytes. So
//! the memory of two renderings is what they do not share, and compressing
//! costs what changed.
//!
//! The document's pieces written whole into a segment are noted as they
//! are written ([`Placements`]), and once the segment is made each takes
//! its bytes from it ([`Placed::place`]): a piece and the rendering then
//! hold one copy of its text, not two.
//!
//! # Guarantees
//!
//! - The segments joined are the document's rendering, byte for byte,
//!   whatever the previous rendering was.
//! - [`Rendering::gzip`] is one gzip member of those bytes: each segment is
//!   deflated by a compressor of its own ending in a sync flush (see
//!   [`crate::status::gzip`]), and the member's CRC-32 is the segments'
//!   combined.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use actix_web::web::Bytes;

use crate::domain::names::ApplicationName;
use crate::status::gzip;

/// How many machines (by host number) or units (by number) a segment
/// holds at most: with 100,000 machines, segments of about 180 KB.
pub const BLOCK: u64 = 512;

/// Which part of the status a segment holds, so that the next rendering
/// finds the segment to compare with (or, for a block no change has
/// touched, to take as it is).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// The model, up to the first machine.
    Head,
    /// Machines whose host numbers divided by [`BLOCK`] are `block`;
    /// `first` when they open the object (no comma before them).
    Machines { block: u64, first: bool },
    /// After the last machine, up to the first application.
    MachinesEnd,
    /// An application's header, up to its first unit.
    Application(ApplicationName),
    /// An application's units whose numbers divided by [`BLOCK`] are
    /// `block`, with their subordinates; `first` as for machines.
    Units {
        application: ApplicationName,
        block: u64,
        first: bool,
    },
    /// After an application's last unit.
    UnitsEnd(ApplicationName),
    /// After the last application.
    Tail,
}

/// Numbers each rendering in segments, so that a document knows whether a
/// rendering it is given is the last one it made.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// A run of a rendering's bytes, with its CRC-32 and, once asked for, its
/// deflated bytes.
pub struct Segment {
    plain: Bytes,
    crc: u32,
    deflated: OnceLock<Bytes>,
}

impl Segment {
    fn of(plain: &[u8]) -> Segment {
        Segment {
            crc: crc32fast::hash(plain),
            plain: Bytes::copy_from_slice(plain),
            deflated: OnceLock::new(),
        }
    }

    /// The CRC-32 and length of the bytes, to combine with others'.
    fn hasher(&self) -> crc32fast::Hasher {
        crc32fast::Hasher::new_with_initial_len(self.crc, self.plain.len() as u64)
    }
}

/// The whole status at one revision, in segments.
#[derive(Default)]
pub struct Rendering {
    segments: Vec<(Label, Arc<Segment>)>,
    /// How many of them were new, not shared with the rendering before.
    fresh: usize,
    /// This rendering's number, unique in the process (0 for none).
    generation: u64,
}

impl Rendering {
    /// The length of the JSON.
    pub fn len(&self) -> usize {
        self.segments.iter().map(|(_, s)| s.plain.len()).sum()
    }

    /// Whether there is no JSON at all (a rendering not yet made).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The JSON in pieces, in order, each shared rather than copied.
    pub fn pieces(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.segments.iter().map(|(_, s)| s.plain.clone())
    }

    /// The JSON joined into one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for (_, segment) in &self.segments {
            out.extend_from_slice(&segment.plain);
        }
        out
    }

    /// How many segments the rendering is in.
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// How many of its segments were new when it was made.
    pub fn fresh(&self) -> usize {
        self.fresh
    }

    /// This rendering's number, unique in the process.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The JSON as one gzip member, in pieces (its segments' among them):
    /// the segments not yet deflated are deflated now, on up to `threads`
    /// threads, and kept for the renderings that share them.
    pub fn gzip(&self, threads: usize) -> Vec<Bytes> {
        let missing: Vec<&Segment> = self
            .segments
            .iter()
            .map(|(_, s)| s.as_ref())
            .filter(|s| s.deflated.get().is_none())
            .collect();
        let plains: Vec<&[u8]> = missing.iter().map(|s| &s.plain[..]).collect();
        for (segment, deflated) in missing.iter().zip(gzip::deflate_pieces(&plains, threads)) {
            // Another compressor may have got there first; the bytes are
            // the same either way.
            let _ = segment.deflated.set(Bytes::from(deflated));
        }
        let mut whole = crc32fast::Hasher::new();
        for (_, segment) in &self.segments {
            whole.combine(&segment.hasher());
        }
        let deflated = self
            .segments
            .iter()
            .map(|(_, s)| s.deflated.get().cloned().unwrap_or_default());
        gzip::member(deflated, whole)
    }
}

/// Where a rendering may be cut, told by the document as it writes.
pub trait Cuts {
    /// A new segment, `next`, starts here: `out` holds what was written
    /// since the last cut.
    fn cut(&mut self, out: &mut Vec<u8>, next: Label);

    /// Takes the previous rendering's segment `label` as the next one
    /// instead of it being written, if there is one: the document asks
    /// only for blocks no change has touched. `out` holds what was
    /// written since the last cut. After `true`, the document cuts
    /// (or reuses) again before it writes.
    fn reuse(&mut self, out: &mut Vec<u8>, label: &Label) -> bool;
}

/// No cuts: the rendering is written whole into its buffer.
pub struct Whole;

impl Cuts for Whole {
    fn cut(&mut self, _out: &mut Vec<u8>, _next: Label) {}

    fn reuse(&mut self, _out: &mut Vec<u8>, _label: &Label) -> bool {
        false
    }
}

/// A piece of the document that can take its text from a segment it was
/// written into whole, so that the two share one copy.
pub trait Placed {
    /// `bytes` are the piece's text, as written, within a segment.
    fn place(&self, bytes: Bytes);
}

/// The pieces written whole into the segment being written, each with
/// where it is in it (from the segment's start).
#[derive(Default)]
pub struct Placements<'a>(RefCell<Vec<(&'a dyn Placed, Range<usize>)>>);

impl<'a> Placements<'a> {
    /// Notes that `piece` is at `at` of the segment being written.
    pub fn note(&self, piece: &'a dyn Placed, at: Range<usize>) {
        self.0.borrow_mut().push((piece, at));
    }

    /// Hands each noted piece its bytes in `segment`, once it is made,
    /// and forgets them.
    fn settle(&self, segment: &Bytes) {
        for (piece, at) in self.0.borrow_mut().drain(..) {
            piece.place(segment.slice(at));
        }
    }
}

/// Makes a [`Rendering`] from what the document writes, reusing the
/// previous rendering's segments that come out the same.
pub struct Segmenter<'p, 'a> {
    /// The previous rendering's segments not yet compared with.
    previous: HashMap<Label, Arc<Segment>>,
    label: Label,
    segments: Vec<(Label, Arc<Segment>)>,
    fresh: usize,
    /// The pieces written into the current segment, to hand their bytes.
    placements: Option<&'p Placements<'a>>,
}

impl<'p, 'a> Segmenter<'p, 'a> {
    /// A segmenter that compares with `previous`, if any. Each of its
    /// segments is let go of once compared (unless something else holds
    /// it), so that making a rendering that shares little with the last
    /// one does not hold both whole.
    pub fn after(previous: Option<Arc<Rendering>>) -> Segmenter<'p, 'a> {
        let previous = match previous.map(Arc::try_unwrap) {
            None => Vec::new(),
            Some(Ok(only)) => only.segments,
            Some(Err(shared)) => shared.segments.clone(),
        };
        Segmenter {
            previous: previous.into_iter().collect(),
            label: Label::Head,
            segments: Vec::new(),
            fresh: 0,
            placements: None,
        }
    }

    /// Hands the pieces `placements` notes their bytes in each segment as
    /// it is made.
    pub fn placing(self, placements: &'p Placements<'a>) -> Segmenter<'p, 'a> {
        Segmenter {
            placements: Some(placements),
            ..self
        }
    }

    /// The rendering, once the document has written the last of it into
    /// `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Rendering {
        self.close(out);
        Rendering {
            segments: self.segments,
            fresh: self.fresh,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Ends the current segment with what `out` holds, and empties it.
    fn close(&mut self, out: &mut Vec<u8>) {
        if out.is_empty() {
            return;
        }
        let same = self
            .previous
            .remove(&self.label)
            .filter(|before| before.plain[..] == out[..]);
        let segment = same.unwrap_or_else(|| {
            self.fresh += 1;
            Arc::new(Segment::of(out))
        });
        if let Some(placements) = self.placements {
            placements.settle(&segment.plain);
        }
        self.segments.push((self.label.clone(), segment));
        out.clear();
    }
}

impl Cuts for Segmenter<'_, '_> {
    fn cut(&mut self, out: &mut Vec<u8>, next: Label) {
        self.close(out);
        self.label = next;
    }

    fn reuse(&mut self, out: &mut Vec<u8>, label: &Label) -> bool {
        let Some(before) = self.previous.remove(label) else {
            return false;
        };
        self.close(out);
        self.segments.push((label.clone(), before));
        true
    }
}

#[cfg(test)]
impl Rendering {
    /// The labels of the segments this rendering does not share with
    /// `other`, in order.
    pub fn fresh_since(&self, other: &Rendering) -> Vec<Label> {
        self.segments
            .iter()
            .filter(|(_, mine)| {
                !other
                    .segments
                    .iter()
                    .any(|(_, theirs)| Arc::ptr_eq(mine, theirs))
            })
            .map(|(label, _)| label.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;
    use proptest::prelude::*;

    use super::*;

    fn gunzip(member: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        GzDecoder::new(member)
            .read_to_end(&mut out)
            .expect("a valid gzip member");
        out
    }

    /// A rendering of `parts` (label number and bytes), cut before each.
    fn render(parts: &[(u64, Vec<u8>)], previous: Option<&Arc<Rendering>>) -> Arc<Rendering> {
        let mut segmenter = Segmenter::after(previous.cloned());
        let mut out = Vec::new();
        for (label, bytes) in parts {
            segmenter.cut(
                &mut out,
                Label::Machines {
                    block: *label,
                    first: false,
                },
            );
            out.extend_from_slice(bytes);
        }
        Arc::new(segmenter.finish(&mut out))
    }

    fn joined(parts: &[(u64, Vec<u8>)]) -> Vec<u8> {
        parts.iter().flat_map(|(_, b)| b.clone()).collect()
    }

    #[test]
    fn a_segment_that_comes_out_the_same_is_shared_and_not_deflated_again() {
        let before = vec![
            (0, b"{\"a\":1,".to_vec()),
            (1, b"\"b\":2,".to_vec()),
            (2, b"\"c\":3}".to_vec()),
        ];
        let first = render(&before, None);
        assert_eq!(gunzip(&first.gzip(2).concat()), joined(&before));
        let mut after = before.clone();
        after[1].1 = b"\"b\":20,".to_vec();
        let second = render(&after, Some(&first));
        assert_eq!(second.to_vec(), joined(&after));
        assert_eq!(
            second.fresh_since(&first),
            [Label::Machines {
                block: 1,
                first: false
            }]
        );
        // The shared segments are deflated already; the changed one is not.
        let deflated: Vec<bool> = second
            .segments
            .iter()
            .map(|(_, s)| s.deflated.get().is_some())
            .collect();
        assert_eq!(deflated, [true, false, true]);
        assert_eq!(gunzip(&second.gzip(1).concat()), joined(&after));
    }

    #[test]
    fn the_gzipped_member_holds_the_segments_deflated_not_copies() {
        let parts = vec![(0, b"{\"a\":1,".to_vec()), (1, b"\"b\":2}".to_vec())];
        let rendering = render(&parts, None);
        let member = rendering.gzip(2);
        // The header, each segment deflated, the end.
        assert_eq!(member.len(), 4);
        for (piece, (_, segment)) in member[1..3].iter().zip(&rendering.segments) {
            let deflated = segment.deflated.get().expect("deflated");
            assert_eq!(piece.as_ptr(), deflated.as_ptr());
            assert_eq!(piece.len(), deflated.len());
        }
        assert_eq!(gunzip(&member.concat()), joined(&parts));
    }

    #[test]
    fn same_bytes_under_another_label_are_not_taken_for_it() {
        let first = render(&[(0, b"x".to_vec()), (1, b"y".to_vec())], None);
        let second = render(&[(0, b"y".to_vec()), (1, b"x".to_vec())], Some(&first));
        assert_eq!(second.fresh_since(&first).len(), 2);
        assert_eq!(second.to_vec(), b"yx");
    }

    #[test]
    fn an_empty_rendering_is_an_empty_member() {
        let empty = render(&[], None);
        assert!(empty.is_empty());
        assert_eq!(gunzip(&empty.gzip(2).concat()), b"");
    }

    proptest! {
        /// Any run of renderings, each after the one before, joins and
        /// gunzips to its own bytes.
        #[test]
        fn renderings_after_renderings_read_back_whole(
            runs in proptest::collection::vec(
                proptest::collection::vec((0u64..6, proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
                1..5,
            ),
            threads in 1usize..4,
        ) {
            let mut previous: Option<Arc<Rendering>> = None;
            for parts in runs {
                let rendering = render(&parts, previous.as_ref());
                prop_assert_eq!(rendering.to_vec(), joined(&parts));
                prop_assert_eq!(gunzip(&rendering.gzip(threads).concat()), joined(&parts));
                previous = Some(rendering);
            }
        }
    }
}
