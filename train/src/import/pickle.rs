//! Rewrites a `torch.save` pickle into the subset libtorch's C++ unpickler runs.
//!
//! That unpickler (torch::pickle_load's) was written for TorchScript's own pickles. On a
//! Python `torch.save` of a state dict it fails: it turns `collections.OrderedDict()` into
//! None (it expects one only as a tensor's empty backward hooks) and treats BUILD as a
//! function call, so the `_metadata` an OrderedDict carries cannot be applied. It also
//! knows only protocol 2 and 8-byte LONG1 integers.
//!
//! The rewrite runs a symbolic pickle machine: each stack entry remembers where in the
//! output its bytes begin, so an opcode can edit what built its operands:
//! - `OrderedDict` REDUCE'd on `()`  ->  EMPTY_DICT (its items follow as SETITEMS);
//! - BUILD on a dict  ->  SETITEM under [`BUILD_STATE_KEY`] (the C++ walker skips it);
//! - BUILD on anything else  ->  a 2-tuple (object, state), inert;
//! - protocol 3/4 spellings  ->  protocol 2 ones; bytes values  ->  None;
//! - `torch.<name>` globals the unpickler rejects (dtypes, Size)  ->  an opaque class.
//!
//! Along the way it collects every storage the pickle refers to (persistent ids), so the
//! container readers can check and serve the storage bytes.

use std::collections::HashMap;

/// Must match kBuildStateKey in train/csrc/pickle_load.cpp.
pub const BUILD_STATE_KEY: &str = "__segtool_build_state__";

/// Deepest nesting of containers (lists, dicts, tuples, reduced objects) accepted. A
/// state dict nests 3-5 levels; libtorch's unpickler and the shim's walk recurse per level
/// (a pickle of 200000 nested lists overflows the stack), so deeper files are refused
/// here, before libtorch sees them.
pub const MAX_NESTING: u32 = 200;

/// Tuples wider than this are not tracked element by element (persistent ids have 5
/// fields): keeps the memo's copies small whatever the file holds.
const MAX_TRACKED_TUPLE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error("pickle ends inside an instruction (truncated file?)")]
    Truncated,
    #[error("pickle has no STOP (truncated file?)")]
    NoStop,
    #[error("unsupported pickle opcode 0x{0:02x} at byte {1} (only protocols 2-5 as torch.save writes them)")]
    Unsupported(u8, usize),
    #[error("malformed pickle at byte {0}: {1}")]
    Malformed(usize, &'static str),
    #[error("pickle nests objects deeper than {MAX_NESTING} levels at byte {0}")]
    TooDeep(usize),
}

/// A storage a tensor in the pickle lives in: persistent id ('storage', torch.<T>Storage,
/// key, location, numel, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct StorageRef {
    pub key: String,
    /// `Float`, `Half`, `Long`, ... (the storage class name without `Storage`).
    pub dtype: String,
    pub numel: u64,
}

impl StorageRef {
    /// Bytes per element, when the dtype is one we know.
    pub fn element_size(&self) -> Option<u64> {
        Some(match self.dtype.as_str() {
            "Double" | "Long" | "ComplexFloat" => 8,
            "Float" | "Int" | "QInt32" => 4,
            "Half" | "BFloat16" | "Short" => 2,
            "Char" | "Byte" | "Bool" | "QInt8" | "QUInt8" => 1,
            "ComplexDouble" => 16,
            d if d.starts_with("Float8") => 1,
            _ => return None,
        })
    }
}

pub struct Rewritten {
    pub pickle: Vec<u8>,
    pub storages: Vec<StorageRef>,
    /// Byte offset just past STOP in the input: where the next pickle of a stream starts.
    pub end: usize,
}

/// What the rewrite needs to know about a value: little, except for globals, strings and
/// ints (to recognise OrderedDict and persistent ids) and dicts (BUILD targets).
#[derive(Clone, Debug)]
enum Kind {
    Global(String, String),
    Str(String),
    Int(i64),
    Tuple(Vec<Kind>),
    Dict,
    Other,
}

struct Item {
    start: usize,
    kind: Kind,
    /// Container nesting of the value (0 for scalars), see [`MAX_NESTING`].
    depth: u32,
}

/// One instruction: opcode, argument bytes, offset of the next instruction.
pub fn next_op(data: &[u8], pos: usize) -> Result<(u8, &[u8], usize), PickleError> {
    let code = *data.get(pos).ok_or(PickleError::Truncated)?;
    let at = pos + 1;
    // Lengths come from the file: checked, a length of 2^63 is a truncated file.
    let take = |n: usize| {
        at.checked_add(n)
            .and_then(|end| data.get(at..end))
            .ok_or(PickleError::Truncated)
    };
    let sized = |width: usize| -> Result<(usize, usize), PickleError> {
        let mut len = [0u8; 8];
        len[..width].copy_from_slice(take(width)?);
        Ok((
            width,
            usize::try_from(u64::from_le_bytes(len)).unwrap_or(usize::MAX),
        ))
    };
    let line = |from: usize| {
        let rest = data.get(from..).ok_or(PickleError::Truncated)?;
        rest.iter()
            .position(|&b| b == b'\n')
            .map(|n| n + 1)
            .ok_or(PickleError::Truncated)
    };
    let len = match code {
        b'J' | b'j' | b'r' => 4,
        b'K' | b'h' | b'q' | 0x80 | 0x82 => 1,
        b'M' | 0x83 => 2,
        b'G' | 0x95 => 8,
        0x84 => 4,
        b'c' | b'i' => {
            let first = line(at)?;
            first + line(at + first)?
        }
        b'F' | b'I' | b'L' | b'P' | b'S' | b'V' | b'g' | b'p' => line(at)?,
        b'U' | b'C' | 0x8a | 0x8c => sized(1).map(|(w, n)| w.saturating_add(n))?,
        b'T' | b'X' | b'B' | 0x8b => sized(4).map(|(w, n)| w.saturating_add(n))?,
        0x8d | 0x8e | 0x96 => sized(8).map(|(w, n)| w.saturating_add(n))?,
        _ => 0,
    };
    Ok((code, take(len)?, at + len))
}

/// Rewrites the pickle starting at `data[start..]`, up to and including its STOP.
pub fn rewrite(data: &[u8], start: usize) -> Result<Rewritten, PickleError> {
    let mut m = Machine {
        out: Vec::with_capacity(data.len() - start),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        storages: Vec::new(),
    };
    let mut pos = start;
    while pos < data.len() {
        let (code, arg, next) = next_op(data, pos)?;
        if code == b'.' {
            m.out.push(b'.');
            return Ok(Rewritten {
                pickle: m.out,
                storages: m.storages,
                end: next,
            });
        }
        m.step(code, arg, pos)?;
        pos = next;
    }
    Err(PickleError::NoStop)
}

#[derive(Clone, Debug)]
struct Memo {
    written: u32,
    kind: Kind,
    depth: u32,
}

struct Machine {
    out: Vec<u8>,
    stack: Vec<Item>,
    marks: Vec<(usize, usize)>, // (stack depth, output offset of the MARK)
    /// The file's memo id -> the id written out (dense: 0, 1, 2, ... in order of first
    /// PUT), what it holds and its nesting depth.
    memo: HashMap<u32, Memo>,
    storages: Vec<StorageRef>,
}

/// 1 + the deepest of `items` (a container holding them).
fn nesting(items: &[Item]) -> u32 {
    1 + items.iter().map(|i| i.depth).max().unwrap_or(0)
}

/// A tuple's kind: its elements when few and flat (persistent ids), else opaque.
fn tuple_kind(items: Vec<Item>) -> Kind {
    if items.len() > MAX_TRACKED_TUPLE {
        return Kind::Other;
    }
    Kind::Tuple(
        items
            .into_iter()
            .map(|i| match i.kind {
                Kind::Tuple(_) => Kind::Other,
                k => k,
            })
            .collect(),
    )
}

fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn le_int(b: &[u8]) -> i64 {
    // Two's complement, little-endian, any width up to 8 (LONG1's payload).
    let fill = if b.last().is_some_and(|&x| x & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut buf = [fill; 8];
    buf[..b.len()].copy_from_slice(b);
    i64::from_le_bytes(buf)
}

impl Machine {
    fn pop(&mut self, pos: usize) -> Result<Item, PickleError> {
        self.stack
            .pop()
            .ok_or(PickleError::Malformed(pos, "stack underflow"))
    }

    fn pop_mark(&mut self, pos: usize) -> Result<(Vec<Item>, usize), PickleError> {
        let (depth, at) = self
            .marks
            .pop()
            .ok_or(PickleError::Malformed(pos, "no MARK"))?;
        if depth > self.stack.len() {
            return Err(PickleError::Malformed(pos, "MARK above stack top"));
        }
        Ok((self.stack.split_off(depth), at))
    }

    fn push(&mut self, start: usize, kind: Kind) {
        self.stack.push(Item {
            start,
            kind,
            depth: 0,
        });
    }

    /// Sets the stack top's nesting to at least `depth`, refusing past [`MAX_NESTING`].
    fn nest_top(&mut self, depth: u32, pos: usize) -> Result<(), PickleError> {
        let top = self
            .stack
            .last_mut()
            .ok_or(PickleError::Malformed(pos, "stack underflow"))?;
        top.depth = top.depth.max(depth);
        if top.depth > MAX_NESTING {
            return Err(PickleError::TooDeep(pos));
        }
        Ok(())
    }

    /// Emits `code arg` verbatim and pushes one value of `kind`.
    fn emit_push(&mut self, code: u8, arg: &[u8], kind: Kind) {
        let start = self.out.len();
        self.out.push(code);
        self.out.extend_from_slice(arg);
        self.push(start, kind);
    }

    fn emit_str(&mut self, s: &[u8]) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s);
    }

    fn emit_global(&mut self, module: &str, name: &str) {
        const KNOWN: [&str; 7] = [
            "device",
            "Tensor",
            "per_tensor_affine",
            "per_channel_affine",
            "per_tensor_symmetric",
            "per_channel_symmetric",
            "per_channel_affine_float_qparams",
        ];
        let module = if module == "torch" && !name.ends_with("Storage") && !KNOWN.contains(&name) {
            "segtool_opaque.torch" // the unpickler aborts on unknown `torch.` globals
        } else {
            module
        };
        let start = self.out.len();
        self.out
            .extend_from_slice(format!("c{module}\n{name}\n").as_bytes());
        self.push(start, Kind::Global(module.into(), name.into()));
    }

    /// One opcode: `arg` is its argument bytes, `pos` its offset (for errors).
    fn step(&mut self, code: u8, arg: &[u8], pos: usize) -> Result<(), PickleError> {
        match code {
            b'q' | b'r' | 0x94 | b'h' | b'j' => self.memo_step(code, arg, pos),
            b'c' | 0x93 => self.global_step(code, arg, pos),
            b't' | b'l' | b'd' | 0x91 | b'e' | b'u' | 0x90 | 0x85..=0x87 | b'a' | b's' => {
                self.container_step(code, pos)
            }
            b'Q' | b'R' | 0x81 | b'b' => self.call_step(code, pos),
            _ => self.value_step(code, arg, pos),
        }
    }

    /// Framing, marks and plain values: ints, strings, empty containers.
    fn value_step(&mut self, code: u8, arg: &[u8], pos: usize) -> Result<(), PickleError> {
        match code {
            0x80 => self.out.extend_from_slice(&[0x80, 2]), // PROTO: the unpickler wants 2
            0x95 => {}                                      // FRAME: an optional read-ahead hint
            b'(' => {
                self.marks.push((self.stack.len(), self.out.len()));
                self.out.push(b'(');
            }
            b'N' | 0x88 | 0x89 | b'G' => self.emit_push(code, arg, Kind::Other),
            b'K' => self.emit_push(code, arg, Kind::Int(arg[0] as i64)),
            b'M' => self.emit_push(
                code,
                arg,
                Kind::Int(u16::from_le_bytes([arg[0], arg[1]]) as i64),
            ),
            b'J' => self.emit_push(code, arg, Kind::Int(le_int(arg))),
            0x8a => {
                // LONG1: the unpickler reads only the 8-byte form.
                let payload = &arg[1..];
                if payload.len() <= 8 {
                    let v = le_int(payload);
                    let mut a = vec![8u8];
                    a.extend_from_slice(&v.to_le_bytes());
                    self.emit_push(0x8a, &a, Kind::Int(v));
                } else {
                    self.emit_push(b'N', &[], Kind::Other);
                }
            }
            0x8b => self.emit_push(b'N', &[], Kind::Other), // LONG4: beyond i64
            b'X' | 0x8d | 0x8c | b'T' | b'U' => {
                let width = match code {
                    0x8c | b'U' => 1,
                    0x8d => 8,
                    _ => 4,
                };
                let s = &arg[width..];
                let start = self.out.len();
                self.emit_str(s);
                self.push(start, Kind::Str(utf8(s)));
            }
            b'B' | b'C' | 0x8e | 0x96 => self.emit_push(b'N', &[], Kind::Other), // bytes: never tensors
            b']' | 0x8f => self.emit_push(b']', &[], Kind::Other), // a set becomes a list
            b'}' => self.emit_push(b'}', &[], Kind::Dict),
            b')' => self.emit_push(b')', &[], Kind::Tuple(Vec::new())),
            _ => return Err(PickleError::Unsupported(code, pos)),
        }
        Ok(())
    }

    /// The memo: PUT renumbers ids densely, GET pushes what was put.
    fn memo_step(&mut self, code: u8, arg: &[u8], pos: usize) -> Result<(), PickleError> {
        match code {
            b'q' | b'r' | 0x94 => {
                let id = match code {
                    b'q' => arg[0] as u32,
                    b'r' => le_int(arg) as u32,
                    _ => self.memo.len() as u32,
                };
                let top = self
                    .stack
                    .last()
                    .ok_or(PickleError::Malformed(pos, "PUT on empty stack"))?;
                // libtorch's unpickler sizes its memo table by the largest id it meets
                // (a 12-byte pickle putting id 0x7e000000 asked for 32 GB): ids are
                // renumbered densely, so the table never outgrows the number of PUTs.
                let written = self
                    .memo
                    .get(&id)
                    .map_or(self.memo.len() as u32, |m| m.written);
                let memo = Memo {
                    written,
                    kind: top.kind.clone(),
                    depth: top.depth,
                };
                self.memo.insert(id, memo);
                self.out.push(b'r');
                self.out.extend_from_slice(&written.to_le_bytes());
            }
            b'h' | b'j' => {
                let id = if code == b'h' {
                    arg[0] as u32
                } else {
                    le_int(arg) as u32
                };
                let Memo {
                    written,
                    kind,
                    depth,
                } = self
                    .memo
                    .get(&id)
                    .cloned()
                    .ok_or(PickleError::Malformed(pos, "GET of unset memo"))?;
                self.emit_push(b'j', &written.to_le_bytes(), kind);
                self.nest_top(depth, pos)?;
            }
            _ => return Err(PickleError::Unsupported(code, pos)),
        }
        Ok(())
    }

    /// Globals, as GLOBAL or protocol 4's STACK_GLOBAL, through the allow-list.
    fn global_step(&mut self, code: u8, arg: &[u8], pos: usize) -> Result<(), PickleError> {
        match code {
            b'c' => {
                let text = utf8(arg);
                let mut parts = text.split('\n');
                let (module, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                self.emit_global(module, name);
            }
            0x93 => {
                // STACK_GLOBAL (protocol 4): module and name strings on the stack -> GLOBAL.
                let (name, module) = (self.pop(pos)?, self.pop(pos)?);
                let (Kind::Str(m), Kind::Str(n)) = (module.kind, name.kind) else {
                    return Err(PickleError::Malformed(pos, "STACK_GLOBAL without strings"));
                };
                self.out.truncate(module.start);
                self.emit_global(&m, &n);
            }
            _ => return Err(PickleError::Unsupported(code, pos)),
        }
        Ok(())
    }

    /// Tuples, lists and dicts built from the stack, tracking their nesting depth.
    fn container_step(&mut self, code: u8, pos: usize) -> Result<(), PickleError> {
        match code {
            b't' | b'l' | b'd' | 0x91 => {
                let (items, start) = self.pop_mark(pos)?;
                let depth = nesting(&items);
                let (out_code, kind) = match code {
                    b't' => (b't', tuple_kind(items)),
                    b'd' => (b'd', Kind::Dict),
                    _ => (b'l', Kind::Other),
                };
                self.out.push(out_code);
                self.push(start, kind);
                self.nest_top(depth, pos)?;
            }
            b'e' | b'u' | 0x90 => {
                let (items, _) = self.pop_mark(pos)?;
                self.out.push(if code == b'u' { b'u' } else { b'e' });
                self.nest_top(nesting(&items), pos)?;
            }
            0x85..=0x87 => {
                let n = (code - 0x84) as usize;
                if self.stack.len() < n {
                    return Err(PickleError::Malformed(pos, "stack underflow"));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.out.push(code);
                let (start, depth) = (items[0].start, nesting(&items));
                self.push(start, tuple_kind(items));
                self.nest_top(depth, pos)?;
            }
            b'a' => {
                let value = self.pop(pos)?;
                self.out.push(code);
                self.nest_top(value.depth + 1, pos)?;
            }
            b's' => {
                let (value, key) = (self.pop(pos)?, self.pop(pos)?);
                self.out.push(code);
                self.nest_top(value.depth.max(key.depth) + 1, pos)?;
            }
            _ => return Err(PickleError::Unsupported(code, pos)),
        }
        Ok(())
    }

    /// Persistent ids (tensor storages), calls and BUILD.
    fn call_step(&mut self, code: u8, pos: usize) -> Result<(), PickleError> {
        match code {
            b'Q' => {
                let pid = self.pop(pos)?;
                self.record_storage(&pid.kind);
                self.out.push(code);
                self.push(pid.start, Kind::Other);
                self.nest_top(pid.depth, pos)?;
            }
            b'R' => {
                let (args, func) = (self.pop(pos)?, self.pop(pos)?);
                let is_od = matches!(&func.kind, Kind::Global(m, n) if m == "collections" && n == "OrderedDict");
                if is_od && matches!(&args.kind, Kind::Tuple(t) if t.is_empty()) {
                    self.out.truncate(func.start);
                    self.emit_push(b'}', &[], Kind::Dict);
                } else {
                    self.out.push(code);
                    self.push(func.start, Kind::Other);
                    self.nest_top(func.depth.max(args.depth) + 1, pos)?;
                }
            }
            0x81 => {
                let (args, cls) = (self.pop(pos)?, self.pop(pos)?);
                self.out.push(code);
                self.push(cls.start, Kind::Other);
                self.nest_top(cls.depth.max(args.depth) + 1, pos)?;
            }
            b'b' => {
                let (state, target) = (self.pop(pos)?, self.pop(pos)?);
                if target.start > state.start || state.start > self.out.len() {
                    return Err(PickleError::Malformed(pos, "BUILD operands out of order"));
                }
                if matches!(target.kind, Kind::Dict) {
                    let tail = self.out.split_off(state.start);
                    self.emit_str(BUILD_STATE_KEY.as_bytes());
                    self.out.extend_from_slice(&tail);
                    self.out.push(b's');
                    self.push(target.start, Kind::Dict);
                } else {
                    self.out.insert(target.start, b'(');
                    self.out.push(b't');
                    self.push(target.start, Kind::Other);
                }
                self.nest_top(target.depth.max(state.depth + 1), pos)?;
            }
            _ => return Err(PickleError::Unsupported(code, pos)),
        }
        Ok(())
    }

    fn record_storage(&mut self, pid: &Kind) {
        let Kind::Tuple(fields) = pid else { return };
        if let [Kind::Str(tag), Kind::Global(_, class), Kind::Str(key), _, Kind::Int(numel), ..] =
            fields.as_slice()
        {
            if tag == "storage" {
                let dtype = class.strip_suffix("Storage").unwrap_or(class).to_string();
                self.storages.push(StorageRef {
                    key: key.clone(),
                    dtype,
                    numel: (*numel).max(0) as u64,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
