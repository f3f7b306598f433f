//! A reader of modelir record files, as the "Record files" section of proto/README.md specifies them: the format
//! sniffed from the first byte, the header checked, every record kept whole (unknown fields included), a torn last
//! entry skipped and reported.
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use prost::Message as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};

use crate::{v1, version};

/// One record: the generated type, and the same record as the writer's own types decode it. prost's typed decode
/// drops fields it does not know, so `message` is the one to copy or re-encode: it keeps every field a newer writer
/// wrote (as a field of the header's types, or as an unknown field when even those lack it).
#[derive(Debug, Clone)]
pub struct StoredRecord {
    pub record: v1::Record,
    pub message: DynamicMessage,
}

/// An entry the reader passed over: a torn last entry, or a complete one that does not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedEntry {
    /// The entry's position in the file, from 0 (the header is 0).
    pub index: usize,
    pub reason: String,
}

/// Reads one record file; iterate it (`for r in reader.by_ref()`), then look at `skipped`.
pub struct RecordReader {
    pub header: v1::RecordHeader,
    /// `"jsonl"` or `"binary"`.
    pub format: &'static str,
    /// E.g. a newer minor IR version than this client's.
    pub warnings: Vec<String>,
    pub skipped: Vec<SkippedEntry>,
    input: BufReader<File>,
    entry_type: MessageDescriptor,
    index: usize,
    done: bool,
}

/// What `next_frame` found: an entry's bytes, a torn last entry, or the end of the file.
enum Frame {
    Entry(Vec<u8>),
    Torn,
    End,
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl RecordReader {
    /// Opens a record file of either format, reads its header and refuses an IR of another major version.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let mut input = BufReader::new(File::open(path)?);
        let format = if input.fill_buf()?.first() == Some(&b'{') { "jsonl" } else { "binary" };
        // The header is read with this client's own types; the entries with the header's (below).
        let own = version::descriptor_pool().get_message_by_name("modelir.v1.RecordFileEntry").expect("generated");
        let mut reader = RecordReader {
            header: v1::RecordHeader::default(),
            format,
            warnings: Vec::new(),
            skipped: Vec::new(),
            input,
            entry_type: own,
            index: 0,
            done: false,
        };
        let not_records =
            || invalid(format!("{} is not a record file: its first entry is not a header", path.display()));
        let Frame::Entry(frame) = reader.next_frame()? else { return Err(not_records()) };
        let entry: v1::RecordFileEntry = reader
            .decode(&frame)
            .and_then(|m| m.transcode_to().map_err(|e| e.to_string()))
            .map_err(|_| not_records())?;
        let Some(v1::record_file_entry::Entry::Header(header)) = entry.entry else { return Err(not_records()) };
        let (theirs, mine) = (header.ir_version.as_str(), version::ir_version());
        if version::check_compatible(theirs, mine).is_err() {
            return Err(invalid(format!(
                "{} was written with modelir IR {theirs}; this reader reads IR {mine} (another major version)",
                path.display()
            )));
        }
        if minor(theirs) > minor(mine) {
            reader.warnings.push(format!(
                "{} was written with the newer IR {theirs} (this reader: {mine}); fields this reader does not know \
                 are kept in StoredRecord::message",
                path.display()
            ));
        }
        let pool = DescriptorPool::decode(header.ir_descriptor_set.as_slice())
            .map_err(|e| invalid(format!("{}: the header's descriptor set does not build: {e}", path.display())))?;
        reader.entry_type = pool.get_message_by_name("modelir.v1.RecordFileEntry").ok_or_else(|| {
            invalid(format!("{}: the header's descriptor set has no modelir.v1.RecordFileEntry", path.display()))
        })?;
        reader.header = header;
        Ok(reader)
    }

    /// An entry decoded with `entry_type`. JSON members even the writer's types lack are ignored, as the spec's
    /// readers do; binary keeps them as unknown fields.
    fn decode(&self, frame: &[u8]) -> Result<DynamicMessage, String> {
        if self.format == "jsonl" {
            let mut json = serde_json::Deserializer::from_slice(frame);
            let options = DeserializeOptions::new().deny_unknown_fields(false);
            DynamicMessage::deserialize_with_options(self.entry_type.clone(), &mut json, &options)
                .map_err(|e| e.to_string())
        } else {
            DynamicMessage::decode(self.entry_type.clone(), frame).map_err(|e| e.to_string())
        }
    }

    fn next_frame(&mut self) -> io::Result<Frame> {
        self.index += 1;
        if self.format == "jsonl" {
            let mut line = Vec::new();
            self.input.read_until(b'\n', &mut line)?;
            // A last line with no terminating newline is torn, even if its bytes parse.
            return Ok(match line.pop() {
                None => Frame::End,
                Some(b'\n') => Frame::Entry(line),
                Some(_) => Frame::Torn,
            });
        }
        let mut size: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = match self.input.fill_buf()?.first() {
                Some(&b) => b,
                None if shift == 0 => return Ok(Frame::End),
                None => return Ok(Frame::Torn),
            };
            self.input.consume(1);
            size |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let mut frame = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(&mut self.input, size), &mut frame)?;
        Ok(if (frame.len() as u64) < size { Frame::Torn } else { Frame::Entry(frame) })
    }

    fn skip(&mut self, reason: String) {
        self.skipped.push(SkippedEntry { index: self.index - 1, reason });
    }
}

impl Iterator for RecordReader {
    /// A record, or a failure to read the file (after which the iteration ends). Torn entries and entries that do
    /// not parse are not errors: they are listed in `skipped`.
    type Item = io::Result<StoredRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let frame = match self.next_frame() {
                Ok(Frame::Entry(frame)) => frame,
                Ok(Frame::Torn) => {
                    self.skip("torn last entry (the file ends inside it)".into());
                    break;
                }
                Ok(Frame::End) => break,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let entry = match self.decode(&frame) {
                Ok(entry) => entry,
                Err(e) => {
                    self.skip(format!("does not parse: {e}"));
                    continue;
                }
            };
            let message = entry.get_field_by_name("record").and_then(|v| v.as_message().cloned());
            let Some(message) = message.filter(|_| entry.has_field_by_name("record")) else {
                self.skip("not a record entry".into());
                continue;
            };
            // The typed record from the writer's bytes: prost skips what it does not know.
            match v1::Record::decode(message.encode_to_vec().as_slice()) {
                Ok(record) => return Some(Ok(StoredRecord { record, message })),
                Err(e) => self.skip(format!("does not parse: {e}")),
            }
        }
        self.done = true;
        None
    }
}

fn minor(version: &str) -> u64 {
    version.split(['-', '+']).next().and_then(|core| core.split('.').nth(1)).and_then(|m| m.parse().ok()).unwrap_or(0)
}
