//! Walking a Karpenter object as a plain value so that every key is
//! accounted for: [`Fields`] hands out a mapping's fields by name and, when
//! it is finished, reports each field nobody asked for; [`Notes`] collects
//! what the conversion says about the document, with field paths.

use super::{Note, NoteKind};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// What the conversion of one document says, in the order it says it.
#[derive(Debug, Default)]
pub(super) struct Notes(pub Vec<Note>);

impl Notes {
    /// `path` could not be carried over; `why` says what to do instead.
    pub fn lost(&mut self, path: &str, why: impl Into<String>) {
        self.push(NoteKind::NotCarried, path, why);
    }

    /// `path` was carried over, with a remark the user should read.
    pub fn info(&mut self, path: &str, why: impl Into<String>) {
        self.push(NoteKind::Info, path, why);
    }

    fn push(&mut self, kind: NoteKind, path: &str, why: impl Into<String>) {
        self.0.push(Note {
            kind,
            path: path.to_string(),
            message: why.into(),
            line: None,
        });
    }
}

/// `parent.key`, or `key` at the top.
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(super) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// `parent[key]`: a map entry, as `quartermaster validate` names them.
pub(super) fn entry(parent: &str, key: &str) -> String {
    format!("{parent}[{key}]")
}

/// The fields of one mapping, handed out by name.
pub(super) struct Fields<'v> {
    path: String,
    map: Option<&'v Map<String, Value>>,
    taken: BTreeSet<&'v str>,
}

impl<'v> Fields<'v> {
    /// The mapping at `path`. A value that is not a mapping (nor null) is
    /// reported as not carried and yields no fields.
    pub fn of(value: &'v Value, path: &str, notes: &mut Notes) -> Fields<'v> {
        let map = match value {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => {
                notes.lost(
                    path,
                    format!("expected a mapping, found {}", describe(other)),
                );
                None
            }
        };
        Fields {
            path: path.to_string(),
            map,
            taken: BTreeSet::new(),
        }
    }

    /// The path of one of its fields.
    pub fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The field `key`, marked as accounted for; `None` when absent or null.
    pub fn take(&mut self, key: &str) -> Option<&'v Value> {
        let (k, v) = self.map?.get_key_value(key)?;
        self.taken.insert(k.as_str());
        (!v.is_null()).then_some(v)
    }

    /// The field `key` as a string (numbers and booleans are written as
    /// YAML would print them); another type is reported as not carried.
    pub fn string(&mut self, key: &str, notes: &mut Notes) -> Option<String> {
        let v = self.take(key)?;
        as_string(v, &self.at(key), notes)
    }

    /// The field `key` as a boolean; another type is reported.
    pub fn boolean(&mut self, key: &str, notes: &mut Notes) -> Option<bool> {
        match self.take(key)? {
            Value::Bool(b) => Some(*b),
            other => {
                notes.lost(
                    &self.at(key),
                    format!("expected true or false, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// The field `key` as an integer; another type is reported.
    pub fn integer(&mut self, key: &str, notes: &mut Notes) -> Option<i64> {
        let v = self.take(key)?;
        let path = self.at(key);
        as_integer(v, &path, notes)
    }

    /// The field `key` as a list; another type is reported.
    pub fn list(&mut self, key: &str, notes: &mut Notes) -> Option<&'v Vec<Value>> {
        match self.take(key)? {
            Value::Array(a) => Some(a),
            other => {
                notes.lost(
                    &self.at(key),
                    format!("expected a list, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// The field `key` as a map of strings (labels, annotations, tags);
    /// entries whose value is not a scalar are reported and left out.
    pub fn string_map(&mut self, key: &str, notes: &mut Notes) -> BTreeMap<String, String> {
        let Some(v) = self.take(key) else {
            return BTreeMap::new();
        };
        string_map(v, &self.at(key), notes)
    }

    /// Reports every field that was not taken as an unknown Karpenter field.
    pub fn finish(self, notes: &mut Notes) {
        let Some(map) = self.map else { return };
        for k in map.keys().filter(|k| !self.taken.contains(k.as_str())) {
            notes.lost(
                &join(&self.path, k),
                "not a field this conversion knows (of Karpenter v1 or otherwise); it is left out: check Karpenter's documentation for what it does and set the equivalent by hand",
            );
        }
    }
}

/// A scalar as a string; another type is reported at `path`.
pub(super) fn as_string(v: &Value, path: &str, notes: &mut Notes) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        other => {
            notes.lost(
                path,
                format!("expected a string, found {}", describe(other)),
            );
            None
        }
    }
}

/// An integer (or a string holding one); another value is reported at `path`.
pub(super) fn as_integer(v: &Value, path: &str, notes: &mut Notes) -> Option<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    if n.is_none() {
        notes.lost(path, format!("expected an integer, found {}", describe(v)));
    }
    n
}

/// A map of scalars as strings; other entries are reported and left out.
pub(super) fn string_map(v: &Value, path: &str, notes: &mut Notes) -> BTreeMap<String, String> {
    let Value::Object(m) = v else {
        notes.lost(path, format!("expected a mapping, found {}", describe(v)));
        return BTreeMap::new();
    };
    m.iter()
        .filter_map(|(k, v)| Some((k.clone(), as_string(v, &entry(path, k), notes)?)))
        .collect()
}

/// A list of strings; other items are reported and left out.
pub(super) fn string_list(v: &Value, path: &str, notes: &mut Notes) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| as_string(v, &index(path, i), notes))
            .collect(),
        other => {
            notes.lost(path, format!("expected a list, found {}", describe(other)));
            Vec::new()
        }
    }
}

/// How a value of the wrong type is named in a note.
pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_nobody_took_are_reported_with_their_paths() {
        let v = json!({"a": 1, "b": "x", "c": null, "d": {"e": true}});
        let mut notes = Notes::default();
        let mut f = Fields::of(&v, "spec", &mut notes);
        assert_eq!(f.integer("a", &mut notes), Some(1));
        assert_eq!(
            f.take("c"),
            None,
            "null reads as absent but is accounted for"
        );
        f.finish(&mut notes);
        let paths: Vec<&str> = notes.0.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["spec.b", "spec.d"]);
        assert!(notes.0.iter().all(|n| n.kind == NoteKind::NotCarried));
    }

    #[test]
    fn values_of_the_wrong_type_are_reported_not_guessed() {
        let v = json!({"w": "ten", "t": [1], "m": {"k": "v", "bad": [1]}, "n": 5});
        let mut notes = Notes::default();
        let mut f = Fields::of(&v, "", &mut notes);
        assert_eq!(f.integer("w", &mut notes), None);
        assert_eq!(f.boolean("t", &mut notes), None);
        let m = f.string_map("m", &mut notes);
        assert_eq!(m.len(), 1);
        assert_eq!(f.string("n", &mut notes).as_deref(), Some("5"));
        f.finish(&mut notes);
        let got: Vec<(&str, &str)> = notes
            .0
            .iter()
            .map(|n| (n.path.as_str(), n.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("w", "expected an integer, found the string \"ten\""),
                ("t", "expected true or false, found a list"),
                ("m[bad]", "expected a string, found a list"),
            ]
        );
        let mut notes = Notes::default();
        let _ = Fields::of(&json!([1]), "spec", &mut notes);
        assert_eq!(notes.0[0].message, "expected a mapping, found a list");
    }
}
