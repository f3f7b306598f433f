package modelir

// A reader of modelir record files, as the "Record files" section of proto/README.md specifies them: the format
// sniffed from the first byte, the header checked, every record kept whole (unknown fields included), a torn last
// entry skipped and reported.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	v1 "modelir.dev/go/modelir/v1"
)

// SkippedEntry is an entry the reader passed over: a torn last entry, or a complete one that does not parse.
type SkippedEntry struct {
	Index  int // the entry's position in the file, from 0 (the header is 0)
	Reason string
}

// Records reads one record file. Open it with OpenRecords, range over All, then look at Skipped.
type Records struct {
	Header   *v1.RecordHeader
	Format   string   // "jsonl" or "binary"
	Warnings []string // e.g. a newer minor IR version than this client's
	Skipped  []SkippedEntry

	file   *os.File
	in     *bufio.Reader
	index  int
	jsonTo protoreflect.MessageType // RecordFileEntry as the header's descriptor set defines it (JSON Lines only)
	types  *dynamicpb.Types
}

// OpenRecords opens a record file of either format, reads its header and refuses an IR of another major version.
func OpenRecords(path string) (*Records, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := &Records{file: file, in: bufio.NewReader(file), Format: "binary"}
	if err := r.readHeader(path); err != nil {
		file.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the file.
func (r *Records) Close() error { return r.file.Close() }

func (r *Records) readHeader(path string) error {
	if first, err := r.in.Peek(1); err == nil && first[0] == '{' {
		r.Format = "jsonl"
	}
	frame, torn, err := r.next()
	if err != nil || frame == nil || torn {
		return fmt.Errorf("%s is not a record file: no complete header entry", path)
	}
	var entry v1.RecordFileEntry
	if r.Format == "jsonl" {
		// The header is read with this client's own types: members a newer writer added to it are ignored.
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(frame, &entry)
	} else {
		err = proto.Unmarshal(frame, &entry)
	}
	if err != nil || entry.GetHeader() == nil {
		return fmt.Errorf("%s is not a record file: its first entry is not a header", path)
	}
	r.Header = entry.GetHeader()
	if err := CheckCompatible(r.Header.GetIrVersion(), IRVersion); err != nil {
		return fmt.Errorf("%s was written with modelir IR %s; this reader reads IR %s (another major version)",
			path, r.Header.GetIrVersion(), IRVersion)
	}
	if newerMinor(r.Header.GetIrVersion(), IRVersion) {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s was written with the newer IR %s (this reader: %s); "+
			"fields this reader does not know are kept as unknown fields", path, r.Header.GetIrVersion(), IRVersion))
	}
	if r.Format == "jsonl" {
		return r.headerTypes(path)
	}
	return nil
}

// headerTypes builds RecordFileEntry from the header's own descriptor set, so that a JSON line's members a newer
// writer added decode as fields (protojson with this client's types would have to drop them: DiscardUnknown).
func (r *Records) headerTypes(path string) error {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(r.Header.GetIrDescriptorSet(), &set); err != nil {
		return fmt.Errorf("%s: the header's descriptor set does not parse: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return fmt.Errorf("%s: the header's descriptor set does not build: %w", path, err)
	}
	found, err := files.FindDescriptorByName("modelir.v1.RecordFileEntry")
	descriptor, ok := found.(protoreflect.MessageDescriptor)
	if err != nil || !ok {
		return fmt.Errorf("%s: the header's descriptor set has no modelir.v1.RecordFileEntry", path)
	}
	r.jsonTo, r.types = dynamicpb.NewMessageType(descriptor), dynamicpb.NewTypes(files)
	return nil
}

// All yields every record in order. Entries that are torn or do not parse are skipped and listed in Skipped; the
// error is only for a failure to read the file, after which nothing more is yielded.
func (r *Records) All() iter.Seq2[*v1.Record, error] {
	return func(yield func(*v1.Record, error) bool) {
		for {
			frame, torn, err := r.next()
			if err != nil {
				yield(nil, err)
				return
			}
			if frame == nil {
				return
			}
			if torn {
				r.Skipped = append(r.Skipped, SkippedEntry{r.index - 1, "torn last entry (the file ends inside it)"})
				return
			}
			record, problem := r.decode(frame)
			if problem != "" {
				r.Skipped = append(r.Skipped, SkippedEntry{r.index - 1, problem})
				continue
			}
			if !yield(record, nil) {
				return
			}
		}
	}
}

func (r *Records) decode(frame []byte) (*v1.Record, string) {
	var entry v1.RecordFileEntry
	if r.Format == "jsonl" {
		// Decode with the writer's types, then re-read the bytes with this client's: what it does not know stays
		// as unknown fields of the typed record (binary protobuf keeps them), so a copy loses nothing.
		dynamic := r.jsonTo.New().Interface()
		// DiscardUnknown only for members even the writer's types lack: the spec's readers ignore those.
		options := protojson.UnmarshalOptions{Resolver: r.types, DiscardUnknown: true}
		if err := options.Unmarshal(frame, dynamic); err != nil {
			return nil, "does not parse: " + err.Error()
		}
		wire, err := proto.Marshal(dynamic)
		if err != nil {
			return nil, "does not re-encode: " + err.Error()
		}
		frame = wire
	}
	if err := proto.Unmarshal(frame, &entry); err != nil {
		return nil, "does not parse: " + err.Error()
	}
	if entry.GetRecord() == nil {
		return nil, "not a record entry"
	}
	return entry.GetRecord(), ""
}

// next reads one entry's bytes: nil at the end of the file; torn when the file ends inside it.
func (r *Records) next() (frame []byte, torn bool, err error) {
	r.index++
	if r.Format == "jsonl" {
		line, err := r.in.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// A last line with no terminating newline is torn, even if its bytes parse.
			return nilIfEmpty(line), len(line) > 0, nil
		}
		return line[:len(line)-1], false, err
	}
	size, err := binary.ReadUvarint(r.in)
	switch {
	case errors.Is(err, io.EOF):
		return nil, false, nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return []byte{}, true, nil
	case err != nil:
		return nil, false, err
	}
	frame = make([]byte, size)
	if _, err := io.ReadFull(r.in, frame); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return frame, true, nil
	} else if err != nil {
		return nil, false, err
	}
	return frame, false, nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// newerMinor says whether version has the same major as mine and a higher minor.
func newerMinor(version, mine string) bool {
	v, m := semver.FindStringSubmatch(version), semver.FindStringSubmatch(mine)
	if v == nil || m == nil || v[1] != m[1] {
		return false
	}
	var vMinor, mMinor int
	fmt.Sscan(v[2], &vMinor)
	fmt.Sscan(m[2], &mMinor)
	return vMinor > mMinor
}
