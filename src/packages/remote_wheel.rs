//! Reading a remote wheel's `METADATA` with a few range requests, instead of
//! downloading the wheel, for indexes that serve no metadata files (PEP
//! 658): the end of the zip (its directory) and its first bytes come at
//! once, then the one member, usually already among them. Going back
//! through many versions of a package then costs a few kilobytes each.
//!
//! What is read this way has no hash to check: it only guides the
//! resolution, and the wheel picked is downloaded whole, checked against its
//! hash, and its own `METADATA` compared with this one before it is
//! installed. A server that ignores ranges, or a wheel the reader cannot make
//! out, gets `None`, and the caller downloads the wheel as before.

use std::io::{self, Read, Seek, SeekFrom};

use reqwest::Url;

use super::budget::InstallBudget;
use super::error::PackageError;
use super::http::{ByteRange, FetchError, HttpClient, Piece, RangeAnswer};
use super::settings::redact;
use super::unpack::{UnpackLimits, read_metadata};

/// Bytes asked for at the end of a wheel: the directory of most wheels, and
/// the whole of a small one (the end record's search reads 64 KiB).
const TAIL_BYTES: u64 = 96 * 1024;
/// Bytes asked for at the start (the first member's header).
const HEAD_BYTES: u64 = 4 * 1024;
/// The first part fetched for a miss; each later one is twice the last.
const FIRST_MISS_BYTES: u64 = 64 * 1024;
/// Misses fetched before giving up on ranges.
const MAX_MISSES: usize = 8;
/// Bytes of one wheel fetched by ranges before giving up on them.
const MAX_RANGE_BYTES: u64 = 8 << 20;

/// What reading by ranges came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Ranged {
    /// The METADATA text.
    Read(String),
    /// The server does not serve ranges (no use asking it again).
    NotServed,
    /// This wheel could not be read so (download it to know why).
    Unread,
}

/// The METADATA text of the wheel at `url`, read by ranges. A wheel said
/// to be over `max_wheel_bytes` (which could never be installed) is not
/// read: the zip reader sizes its work by the file's length, which here is
/// only the server's word. Only a stop (cancellation, deadline, the
/// download budget) is an error.
pub async fn metadata_by_ranges(
    http: &HttpClient,
    url: &Url,
    limits: &UnpackLimits,
    max_wheel_bytes: u64,
    budget: &InstallBudget,
) -> Result<Ranged, PackageError> {
    let fetcher = Fetcher { http, url, budget };
    let (tail, head) = budget
        .stop()
        .race(async {
            Ok::<_, PackageError>(tokio::join!(
                fetcher.piece(ByteRange::Last(TAIL_BYTES)),
                fetcher.piece(ByteRange::Span {
                    first: 0,
                    last: HEAD_BYTES - 1
                }),
            ))
        })
        .await?;
    let (Some(tail), Some(head)) = (tail?, head?) else {
        return Ok(Ranged::NotServed);
    };
    if tail.total != head.total || tail.total > max_wheel_bytes {
        tracing::debug!(url = %redact(url), "a wheel's ranges give no size it could have; downloading the wheel");
        return Ok(Ranged::Unread);
    }
    let mut file = Sparse::new(tail.total);
    file.add(tail);
    file.add(head);
    let mut miss_bytes = FIRST_MISS_BYTES;
    for _ in 0..=MAX_MISSES {
        file.rewind_and_forget_miss();
        let read = read_metadata(&mut file, limits);
        let Some(at) = file.miss else {
            return Ok(match read {
                Ok(text) => Ranged::Read(text),
                Err(e) => {
                    tracing::debug!(url = %redact(url), error = %e, "reading METADATA by ranges failed; downloading the wheel");
                    Ranged::Unread
                }
            });
        };
        if file.fetched() >= MAX_RANGE_BYTES {
            break;
        }
        let last = file.end_of_gap(at, miss_bytes) - 1;
        let Some(piece) = budget
            .stop()
            .race(fetcher.piece(ByteRange::Span { first: at, last }))
            .await?
        else {
            return Ok(Ranged::Unread);
        };
        if piece.total != file.len {
            return Ok(Ranged::Unread);
        }
        file.add(piece);
        miss_bytes = miss_bytes.saturating_mul(2);
    }
    tracing::debug!(url = %redact(url), "METADATA lies too far from the wheel's directory; downloading the wheel");
    Ok(Ranged::Unread)
}

/// Range requests for one wheel, paid for from the install's download budget.
struct Fetcher<'a> {
    http: &'a HttpClient,
    url: &'a Url,
    budget: &'a InstallBudget,
}

impl Fetcher<'_> {
    /// One part of the wheel: `None` when the server does not serve it.
    async fn piece(&self, range: ByteRange) -> Result<Option<Piece>, PackageError> {
        // Every byte is paid for as it arrives, a failed attempt's too.
        let charge = |n: u64| self.budget.downloaded(n).is_ok();
        let answer = self
            .http
            .get_range(self.url, range, MAX_RANGE_BYTES, &charge)
            .await;
        match answer {
            Ok(Some(RangeAnswer::Piece(piece))) => Ok(Some(piece)),
            Ok(_) => Ok(None),
            Err(FetchError::TooLarge(_)) if self.budget.download_limit(1) == 0 => {
                // The budget ran out: that is the install's answer.
                self.budget.downloaded(1).map(|()| None)
            }
            Err(e) => {
                tracing::debug!(url = %redact(self.url), error = %e, "a range request failed; downloading the wheel");
                Ok(None)
            }
        }
    }
}

/// A file of which only some parts are here: reading elsewhere fails and
/// notes where, so that part can be fetched and the read tried again.
struct Sparse {
    len: u64,
    pos: u64,
    pieces: Vec<(u64, Vec<u8>)>,
    /// Where the last read found nothing.
    miss: Option<u64>,
}

impl Sparse {
    fn new(len: u64) -> Self {
        Self {
            len,
            pos: 0,
            pieces: Vec::new(),
            miss: None,
        }
    }

    fn add(&mut self, piece: Piece) {
        if !piece.body.is_empty() {
            self.pieces.push((piece.start, piece.body));
        }
    }

    fn rewind_and_forget_miss(&mut self) {
        self.pos = 0;
        self.miss = None;
    }

    /// Bytes fetched so far.
    fn fetched(&self) -> u64 {
        self.pieces.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Where a fetch from `at` of at most `want` bytes should stop: before
    /// the next part already here, and at the end of the file.
    fn end_of_gap(&self, at: u64, want: u64) -> u64 {
        let next = self
            .pieces
            .iter()
            .map(|(start, _)| *start)
            .filter(|start| *start > at)
            .min()
            .unwrap_or(self.len);
        at.saturating_add(want).min(next).min(self.len)
    }

    fn piece_at(&self, pos: u64) -> Option<&[u8]> {
        self.pieces.iter().find_map(|(start, body)| {
            let offset = pos.checked_sub(*start)?;
            (offset < body.len() as u64).then(|| &body[offset as usize..])
        })
    }
}

impl Read for Sparse {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let not_here = || io::Error::other("this part of the wheel is not fetched yet");
        // After a miss every read fails, so the zip reader stops at once
        // (it would otherwise look elsewhere for another directory) and the
        // first miss is the part to fetch.
        if self.miss.is_some() {
            return Err(not_here());
        }
        if buf.is_empty() || self.pos >= self.len {
            return Ok(0);
        }
        let Some(here) = self.piece_at(self.pos) else {
            self.miss = Some(self.pos);
            return Err(not_here());
        };
        let n = buf.len().min(here.len());
        buf[..n].copy_from_slice(&here[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Sparse {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    use crate::packages::test_wheel::{TestWheel, Tweak};

    fn limits() -> UnpackLimits {
        UnpackLimits {
            max_members: 100_000,
            max_total_bytes: 1 << 30,
            max_member_bytes: 1 << 28,
            max_metadata_bytes: 1 << 20,
        }
    }

    /// `n` bytes that do not compress, from `seed`.
    fn noise(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect()
    }

    /// Reads METADATA from `bytes` as the range reader would, fetching a
    /// miss from the bytes themselves; returns the text and the fetches.
    fn read_in_pieces(bytes: &[u8]) -> (Option<String>, usize) {
        let len = bytes.len() as u64;
        let part = |first: u64, last: u64| Piece {
            start: first,
            body: bytes[first as usize..=last as usize].to_vec(),
            total: len,
        };
        let mut file = Sparse::new(len);
        file.add(part(len.saturating_sub(TAIL_BYTES), len - 1));
        file.add(part(0, (HEAD_BYTES - 1).min(len - 1)));
        let mut fetches = 2;
        let mut want = FIRST_MISS_BYTES;
        for _ in 0..=MAX_MISSES {
            file.rewind_and_forget_miss();
            let read = read_metadata(&mut file, &limits());
            let Some(at) = file.miss else {
                return (read.ok(), fetches);
            };
            let last = file.end_of_gap(at, want) - 1;
            file.add(part(at, last));
            fetches += 1;
            want *= 2;
        }
        (None, fetches)
    }

    #[test]
    fn a_small_wheel_is_read_from_its_two_first_parts() {
        let wheel = TestWheel::new("demo", "1.0").build();
        let whole = read_metadata(Cursor::new(&wheel), &limits()).unwrap();
        let (text, fetches) = read_in_pieces(&wheel);
        assert_eq!(text.as_deref(), Some(whole.as_str()));
        assert_eq!(fetches, 2);
    }

    #[test]
    fn a_large_wheel_costs_a_few_parts_not_the_whole() {
        // METADATA first, then 3 MiB of members that do not compress.
        let mut wheel = TestWheel::new("big", "2.0");
        let noise = noise(3 << 20, 7);
        for i in 0..3 {
            wheel = wheel.file(&format!("big/blob{i}.bin"), &noise[i << 20..(i + 1) << 20]);
        }
        let bytes = wheel.tweak(Tweak::MetadataFirst).build();
        let whole = read_metadata(Cursor::new(&bytes), &limits()).unwrap();
        let (text, fetches) = read_in_pieces(&bytes);
        assert_eq!(text.as_deref(), Some(whole.as_str()));
        assert!(fetches <= 3, "{fetches} fetches");
    }

    #[test]
    fn a_wheel_of_thousands_of_members_costs_a_few_parts() {
        // transformers: ~2,000 members, a directory of a few hundred KiB.
        let mut wheel = TestWheel::new("many", "3.0");
        for i in 0..3000 {
            let blob = noise(1500, i);
            wheel = wheel.file(&format!("many/models/module_number_{i}/weights.py"), blob);
        }
        let bytes = wheel.tweak(Tweak::MetadataFirst).build();
        let whole = read_metadata(Cursor::new(&bytes), &limits()).unwrap();
        let (text, fetches) = read_in_pieces(&bytes);
        assert_eq!(text.as_deref(), Some(whole.as_str()));
        assert!(fetches <= 5, "{fetches} fetches");
    }

    #[test]
    fn reading_outside_the_parts_fails_and_says_where() {
        let mut file = Sparse::new(100);
        file.add(Piece {
            start: 90,
            body: vec![1; 10],
            total: 100,
        });
        file.seek(SeekFrom::Start(50)).unwrap();
        let mut buf = [0u8; 4];
        assert!(file.read(&mut buf).is_err());
        assert_eq!(file.miss, Some(50));
        assert_eq!(file.end_of_gap(50, 1000), 90);
        file.seek(SeekFrom::End(-4)).unwrap();
        assert!(
            file.read(&mut buf).is_err(),
            "every read fails after a miss"
        );
        file.rewind_and_forget_miss();
        file.seek(SeekFrom::End(-4)).unwrap();
        file.read_exact(&mut buf).unwrap();
        assert_eq!(buf, [1; 4]);
        assert!(file.seek(SeekFrom::Current(-200)).is_err());
    }
}
