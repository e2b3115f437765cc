//! The whole status compressed for clients that accept gzip: with 100,000
//! machines the JSON is about 60 MB, and four readers copying that over a
//! connection each cost more than rendering it; gzipped it is about 4 MB.
//!
//! The document comes in pieces (a rendering's segments, see
//! [`crate::status::rendering`]) that are deflated at once on every core,
//! each by a compressor of its own ending in a sync flush, so that each
//! piece's output ends on a byte boundary and the pieces join into one
//! deflate stream. One gzip member wraps them: a
//! header, the pieces, an empty final block, and the CRC-32 and length of
//! the whole. Any gzip decoder reads it as one member (a piece does not
//! refer back into the piece before it, which deflate allows but does not
//! require).

use actix_web::web::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

use crate::status::cores;

/// zlib's level 2: with 100,000 machines, two-thirds of the size of level
/// 1 for a tenth more time.
const LEVEL: u32 = 2;

/// A gzip member's header: deflate, no flags, no time, no extra fields,
/// the operating system unknown.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// A final deflate block of fixed codes holding nothing but its end.
const EMPTY_FINAL_BLOCK: [u8; 2] = [0x03, 0x00];

/// Each of `pieces` deflated by a compressor of its own ending in a sync
/// flush, on up to `threads` threads: pieces that join, in order, into one
/// deflate stream (see [`member`]).
pub fn deflate_pieces(pieces: &[&[u8]], threads: usize) -> Vec<Vec<u8>> {
    let threads = threads.clamp(1, pieces.len().max(1));
    if threads == 1 {
        return pieces.iter().map(|piece| deflate_piece(piece)).collect();
    }
    // Shares of about equal bytes, so that one thread does not get the
    // large pieces.
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    let per_thread = total.div_ceil(threads).max(1);
    let mut shares: Vec<&[&[u8]]> = Vec::with_capacity(threads);
    let (mut from, mut bytes) = (0, 0);
    for (i, piece) in pieces.iter().enumerate() {
        bytes += piece.len();
        if bytes >= per_thread {
            shares.push(&pieces[from..=i]);
            (from, bytes) = (i + 1, 0);
        }
    }
    if from < pieces.len() {
        shares.push(&pieces[from..]);
    }
    cores::in_order(shares, |share| {
        share.iter().map(|p| deflate_piece(p)).collect()
    })
}

/// One gzip member of `deflated` pieces (each from [`deflate_pieces`], in
/// the order of the data), whose data's CRC-32 and length `data` holds:
/// its bytes in order, the pieces themselves among them (not copied: with
/// 100,000 machines, a member copied out of them was 4 MB more held,
/// and copied again for each revision).
pub fn member(deflated: impl Iterator<Item = Bytes>, data: crc32fast::Hasher) -> Vec<Bytes> {
    let mut out = vec![header()];
    out.extend(deflated);
    out.push(end(data));
    out
}

/// What a gzip member begins with; deflated pieces follow (see [`member`]).
pub fn header() -> Bytes {
    Bytes::from_static(&HEADER)
}

/// What ends a gzip member after its deflated pieces: an empty final
/// block, then the CRC-32 and length of the data, which `data` holds.
pub fn end(data: crc32fast::Hasher) -> Bytes {
    let length = data.total_len();
    let mut end = Vec::with_capacity(EMPTY_FINAL_BLOCK.len() + 8);
    end.extend_from_slice(&EMPTY_FINAL_BLOCK);
    end.extend_from_slice(&data.finalize().to_le_bytes());
    // ISIZE is the length modulo 2^32, as RFC 1952 has it.
    end.extend_from_slice(&((length & 0xffff_ffff) as u32).to_le_bytes());
    Bytes::from(end)
}

/// `piece` deflated by a compressor of its own, ending in a sync flush
/// (non-final blocks, byte-aligned), so that pieces join.
pub fn deflate_piece(piece: &[u8]) -> Vec<u8> {
    let mut compressor = Compress::new(Compression::new(LEVEL), false);
    let mut out = Vec::with_capacity(piece.len() / 8 + 64);
    loop {
        let taken = usize::try_from(compressor.total_in()).unwrap_or(piece.len());
        let status = compressor
            .compress_vec(&piece[taken..], &mut out, FlushCompress::Sync)
            .unwrap_or_else(|e| unreachable!("deflating into a growing buffer cannot fail: {e}"));
        let taken = usize::try_from(compressor.total_in()).unwrap_or(piece.len());
        // The flush is complete once everything is taken and the output
        // was not filled to the brim (zlib's rule for a finished flush).
        if taken == piece.len() && out.len() < out.capacity() && status != Status::BufError {
            return out;
        }
        out.reserve(out.capacity().max(4096));
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;
    use proptest::prelude::*;

    use super::*;

    fn gunzip(member: &[u8]) -> Vec<u8> {
        let mut decoder = GzDecoder::new(member);
        let mut out = Vec::new();
        decoder.read_to_end(&mut out).expect("a valid gzip member");
        // One member, and nothing after it.
        let mut rest = Vec::new();
        decoder.into_inner().read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{} bytes after the member", rest.len());
        out
    }

    /// Pieces of a mebibyte: large enough that they compress nearly as
    /// well as the whole, small enough to share out among cores.
    const CHUNK: usize = 1 << 20;

    /// `data` as one gzip member, deflated on up to `threads` threads.
    fn gzip(data: &[u8], threads: usize) -> Vec<u8> {
        gzip_in_pieces(data, threads, CHUNK)
    }

    /// `data` cut into pieces of `piece_size` bytes and gzipped as the
    /// pieces of a rendering are.
    fn gzip_in_pieces(data: &[u8], threads: usize, piece_size: usize) -> Vec<u8> {
        let pieces: Vec<&[u8]> = data.chunks(piece_size.max(1)).collect();
        let deflated = deflate_pieces(&pieces, threads);
        let mut whole = crc32fast::Hasher::new();
        whole.update(data);
        member(deflated.into_iter().map(Bytes::from), whole).concat()
    }

    /// A status-like document of `machines` entries.
    fn document(machines: usize) -> Vec<u8> {
        let mut out = String::from("{\"machines\":{");
        for i in 0..machines {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                "\"{i}\":{{\"juju-status\":{{\"current\":\"started\"}},\"instance-id\":\"i-{:016x}\"}}",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ));
        }
        out.push_str("}}");
        out.into_bytes()
    }

    #[test]
    fn a_document_of_several_pieces_is_one_member_that_reads_back_whole() {
        // About 3.5 pieces.
        let data = document(50_000);
        assert!(data.len() > 3 * CHUNK, "{}", data.len());
        for threads in [1, 2, 3, 8] {
            let member = gzip(&data, threads);
            assert!(member.len() < data.len() / 4, "{}", member.len());
            assert_eq!(gunzip(&member), data, "{threads} threads");
        }
    }

    #[test]
    fn nothing_and_a_piece_exactly_read_back() {
        assert_eq!(gunzip(&gzip(b"", 2)), b"");
        let exact = vec![b'x'; CHUNK];
        assert_eq!(gunzip(&gzip(&exact, 2)), exact);
        let over = vec![b'y'; CHUNK + 1];
        assert_eq!(gunzip(&gzip(&over, 2)), over);
    }

    proptest! {
        #[test]
        fn any_bytes_in_any_pieces_read_back(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            threads in 1usize..4,
            piece_size in 1usize..2000,
        ) {
            prop_assert_eq!(gunzip(&gzip_in_pieces(&data, threads, piece_size)), data);
        }
    }
}
