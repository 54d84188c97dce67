//! A document checked against its schema before anything is read from it:
//! every field the schema does not define (with the known field spelled
//! most alike), every value of the wrong type, said the way YAML says it
//! (`expected an integer, found the string "lots"`), every value outside
//! its enum or range, every required field missing; all of them, not the
//! first. The schema is a CRD's OpenAPI v3 schema or a `schemars` JSON
//! schema (`$ref`, `anyOf`, `oneOf`, `allOf`, type lists), so CRDs,
//! scenario files and every other file share the same check.

use super::path::Path;
use crate::api::validate::distance;
use crate::api::FieldError;
use serde_json::{Map, Value};

/// Every problem of `value` against `schema` (whose `$ref`s resolve in
/// `root`), with paths below `at`.
pub fn problems(value: &Value, schema: &Value, root: &Value, at: &Path) -> Vec<FieldError> {
    let mut out = Vec::new();
    Walk { root }.check(value, schema, &Where::new(at), &mut out);
    out
}

/// A path as it is rendered and as it is looked up.
#[derive(Clone)]
struct Where {
    text: String,
    path: Path,
}

impl Where {
    fn new(at: &Path) -> Where {
        Where {
            text: at.to_string(),
            path: at.clone(),
        }
    }

    fn field(&self, k: &str) -> Where {
        Where {
            text: if self.text.is_empty() {
                k.to_string()
            } else {
                format!("{}.{k}", self.text)
            },
            path: self.path.key(k),
        }
    }

    fn entry(&self, k: &str) -> Where {
        Where {
            text: format!("{}[{k}]", self.text),
            path: self.path.key(k),
        }
    }

    fn item(&self, i: usize) -> Where {
        Where {
            text: format!("{}[{i}]", self.text),
            path: self.path.index(i),
        }
    }

    fn error(&self, message: impl Into<String>) -> FieldError {
        FieldError::new(
            if self.text.is_empty() {
                "(document)".to_string()
            } else {
                self.text.clone()
            },
            message,
        )
    }
}

struct Walk<'a> {
    root: &'a Value,
}

impl<'a> Walk<'a> {
    /// `schema` with its `$ref` followed (`#/$defs/X`, `#/definitions/X`).
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        let mut s = schema;
        for _ in 0..32 {
            match s.get("$ref").and_then(Value::as_str) {
                Some(r) => match r.strip_prefix('#').and_then(|p| self.root.pointer(p)) {
                    Some(target) => s = target,
                    None => return s,
                },
                None => return s,
            }
        }
        s
    }

    fn check(&self, value: &Value, schema: &'a Value, at: &Where, out: &mut Vec<FieldError>) {
        let schema = self.resolve(schema);
        if schema.as_bool() == Some(true) || schema.as_object().is_some_and(Map::is_empty) {
            return;
        }
        if schema.as_bool() == Some(false) {
            out.push(at.error("not allowed here"));
            return;
        }
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            && schema.get("properties").is_none()
        {
            return;
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for s in all {
                self.check(value, s, at, out);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                self.alternatives(value, alternatives, at, out);
            }
        }
        if value.is_null() && self.allows_null(schema) {
            return;
        }
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            match value {
                Value::String(_) => {}
                Value::Number(n) if n.is_f64() => out.push(at.error(format!(
                    "{n} must be quoted (\"{n}\"): an integer or a string is expected here"
                ))),
                Value::Number(_) => {}
                other => out.push(at.error(format!(
                    "expected a quantity (an integer or a string), found {}",
                    found(other)
                ))),
            }
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.contains(value) {
                out.push(at.error(not_in_enum(value, allowed)));
                return;
            }
        }
        let Some(types) = types_of(schema) else {
            // No type: only structure (properties) may be checked.
            if let Value::Object(fields) = value {
                self.object(fields, schema, at, out);
            }
            return;
        };
        let fits = types.iter().any(|t| fits(value, t));
        if !fits {
            out.push(at.error(format!(
                "expected {}, found {}",
                expected(&types),
                found(value)
            )));
            return;
        }
        match value {
            Value::Object(fields) => self.object(fields, schema, at, out),
            Value::Array(items) => {
                let len = items.len() as u64;
                if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                    if len < min {
                        out.push(at.error(if min == 1 {
                            "must not be empty".to_string()
                        } else {
                            format!("needs at least {min} items")
                        }));
                    }
                }
                if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                    if len > max {
                        out.push(at.error(format!("at most {max} items are allowed")));
                    }
                }
                if let Some(s) = schema.get("items") {
                    for (i, v) in items.iter().enumerate() {
                        self.check(v, s, &at.item(i), out);
                    }
                }
            }
            Value::Number(n) => range(n, schema, at, out),
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                    if len > max {
                        out.push(at.error(format!("at most {max} characters are allowed")));
                    }
                }
                if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                    if len < min {
                        out.push(at.error(if min == 1 {
                            "must not be empty".to_string()
                        } else {
                            format!("needs at least {min} characters")
                        }));
                    }
                }
            }
            _ => {}
        }
    }

    fn allows_null(&self, schema: &Value) -> bool {
        schema.get("nullable") == Some(&Value::Bool(true))
            || types_of(schema).is_some_and(|t| t.contains(&"null"))
            || ["anyOf", "oneOf"].iter().any(|k| {
                schema
                    .get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|alts| alts.iter().any(|a| self.allows_null(self.resolve(a))))
            })
    }

    /// `anyOf` / `oneOf`: fine when some alternative takes the value;
    /// otherwise the problems of the alternative that fits best (an
    /// externally tagged enum's variant whose tag the value carries, or
    /// the one with the fewest problems).
    fn alternatives(
        &self,
        value: &Value,
        alts: &'a [Value],
        at: &Where,
        out: &mut Vec<FieldError>,
    ) {
        if value.is_null() && alts.iter().any(|a| self.allows_null(self.resolve(a))) {
            return;
        }
        let mut best: Option<Vec<FieldError>> = None;
        for a in alts {
            let a = self.resolve(a);
            if a.get("type").and_then(Value::as_str) == Some("null") {
                continue;
            }
            let mut p = Vec::new();
            self.check(value, a, at, &mut p);
            if p.is_empty() {
                return;
            }
            // A variant keyed by one property the value has is the one meant.
            let tagged = value.as_object().is_some_and(|o| {
                o.len() == 1
                    && a.get("required")
                        .and_then(Value::as_array)
                        .is_some_and(|r| {
                            r.len() == 1 && o.contains_key(r[0].as_str().unwrap_or(""))
                        })
            });
            if tagged {
                out.extend(p);
                return;
            }
            if best.as_ref().is_none_or(|b| p.len() < b.len()) {
                best = Some(p);
            }
        }
        // Tags of the variants, to name what was expected.
        let tags: Vec<&str> = alts
            .iter()
            .filter_map(|a| {
                let a = self.resolve(a);
                let r = a.get("required")?.as_array()?;
                (r.len() == 1 && a.get("properties")?.as_object()?.len() == 1)
                    .then(|| r[0].as_str())
                    .flatten()
            })
            .collect();
        if !tags.is_empty() && value.is_object() {
            let got: Vec<&String> = value
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            let hint = got
                .first()
                .and_then(|k| did_you_mean(k, tags.iter().copied()))
                .unwrap_or_default();
            out.push(at.error(format!(
                "expected one of {}{hint}",
                tags.iter().map(|t| format!("{t}: {{...}}")).collect::<Vec<_>>().join(", ")
            )));
            return;
        }
        out.extend(best.unwrap_or_default());
    }

    fn object(
        &self,
        fields: &Map<String, Value>,
        schema: &'a Value,
        at: &Where,
        out: &mut Vec<FieldError>,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let extra = schema.get("additionalProperties");
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if !fields.contains_key(r) {
                    out.push(at.field(r).error("required field is missing"));
                }
            }
        }
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
            if fields.len() as u64 > max {
                out.push(at.error(format!("at most {max} entries are allowed")));
            }
        }
        for (k, v) in fields {
            if let Some(s) = props.and_then(|p| p.get(k)) {
                self.check(v, s, &at.field(k), out);
            } else if let Some(s) = extra.filter(|s| s.is_object()) {
                self.check(v, s, &at.entry(k), out);
            } else if extra == Some(&Value::Bool(true)) || (props.is_none() && extra.is_none()) {
                // Free-form.
            } else if schema.get("x-kubernetes-preserve-unknown-fields") != Some(&Value::Bool(true))
            {
                let known = props.map(|p| p.keys().map(String::as_str).collect::<Vec<_>>());
                let hint = known
                    .and_then(|names| did_you_mean(k, names.into_iter()))
                    .unwrap_or_default();
                out.push(at.field(k).error(format!("unknown field{hint}")));
            }
        }
    }
}

/// ` (did you mean X?)` for the candidate spelled most like `word`, within
/// a few edits; empty otherwise.
pub fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    let first = lower.chars().next();
    candidates
        .map(|k| {
            let kl = k.to_ascii_lowercase();
            // Ties go to the name that starts alike, then to the one of
            // the nearest length (`knd` is `kind`, not `end`).
            let d = distance(&kl, &lower);
            let starts_apart = kl.chars().next() != first;
            (d, starts_apart, kl.len().abs_diff(lower.len()), k)
        })
        .filter(|(d, _, _, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, _, _, k)| format!(" (did you mean {k}?)"))
}

fn types_of(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn fits(value: &Value, t: &str) -> bool {
    match (t, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("null", Value::Null)
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
        }
        _ => false,
    }
}

fn range(n: &serde_json::Number, schema: &Value, at: &Where, out: &mut Vec<FieldError>) {
    let Some(x) = n.as_f64() else { return };
    let (lo, hi) = match schema.get("format").and_then(Value::as_str) {
        Some("int32") => (i32::MIN as f64, i32::MAX as f64),
        Some("uint32") => (0.0, u32::MAX as f64),
        Some("uint8") => (0.0, 255.0),
        Some("uint16") => (0.0, u16::MAX as f64),
        Some("uint64" | "uint") => (0.0, u64::MAX as f64),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    let lo = schema
        .get("minimum")
        .and_then(Value::as_f64)
        .map_or(lo, |m| m.max(lo));
    let hi = schema
        .get("maximum")
        .and_then(Value::as_f64)
        .map_or(hi, |m| m.min(hi));
    if x < lo || x > hi {
        let show = |v: f64| {
            if v.fract() == 0.0 && v.abs() < 1e16 {
                format!("{}", v as i64)
            } else {
                format!("{v}")
            }
        };
        let span = match (lo.is_finite(), hi.is_finite()) {
            (true, true) => format!("from {} to {}", show(lo), show(hi)),
            (true, false) => format!("at least {}", show(lo)),
            (false, true) => format!("at most {}", show(hi)),
            (false, false) => return,
        };
        out.push(at.error(format!("{n} is out of range: expected a number {span}")));
    }
}

fn not_in_enum(value: &Value, allowed: &[Value]) -> String {
    let names: Vec<String> = allowed
        .iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect();
    let hint = value
        .as_str()
        .and_then(|s| did_you_mean(s, names.iter().map(String::as_str)))
        .unwrap_or_default();
    format!("{} is not one of {}{hint}", found(value), names.join(", "))
}

/// The expected types, as a person says them.
fn expected(types: &[&str]) -> String {
    let words: Vec<&str> = types
        .iter()
        .filter(|t| **t != "null")
        .map(|t| match *t {
            "object" => "a mapping",
            "array" => "a list",
            "string" => "a string",
            "integer" => "an integer",
            "number" => "a number",
            "boolean" => "true or false",
            other => other,
        })
        .collect();
    words.join(" or ")
}

/// What was found instead, as a person says it.
pub fn found(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("{b}"),
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

    fn check(value: Value, schema: Value) -> Vec<String> {
        problems(&value, &schema, &schema, &Path::default())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_problem_is_named_with_its_path_not_only_the_first() {
        let schema = json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                "mode": {"type": "string", "enum": ["Spot", "OnDemand"]},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "boolean"}}}}
            }
        });
        let got = check(
            json!({"replicas": "lots", "mode": "spot", "tags": {"a": 1}, "itmes": [], "items": [{"a": "yes"}]}),
            schema,
        );
        let mut want = [
            "name: required field is missing",
            "itmes: unknown field (did you mean items?)",
            "items[0].a: expected true or false, found the string \"yes\"",
            "mode: the string \"spot\" is not one of Spot, OnDemand (did you mean Spot?)",
            "replicas: expected an integer, found the string \"lots\"",
            "tags[a]: expected a string, found the number 1",
        ];
        let mut got = got;
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn the_suggestion_starts_like_the_misspelt_word() {
        assert_eq!(
            did_you_mean("knd", ["end", "kind", "total"].into_iter()).as_deref(),
            Some(" (did you mean kind?)")
        );
        assert_eq!(did_you_mean("zzzzzz", ["kind"].into_iter()), None);
    }

    #[test]
    fn integers_are_checked_against_their_format_and_range() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer", "format": "int32"},
            "w": {"type": "integer", "minimum": 0, "maximum": 100}
        }});
        let got = check(json!({"n": 3_000_000_000u64, "w": 101}), schema.clone());
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("n: 3000000000 is out of range"),
            "{got:?}"
        );
        assert!(got[1].contains("from 0 to 100"), "{got:?}");
        assert!(check(json!({"n": 2.5}), schema.clone())[0].contains("expected an integer"));
        assert!(check(json!({"n": 7, "w": 0}), schema).is_empty());
    }

    #[test]
    fn schemars_references_options_and_tagged_enums_are_followed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {"type": ["integer", "null"]},
                "cloud": {"anyOf": [{"$ref": "#/$defs/Cloud"}, {"type": "null"}]},
                "workloads": {"type": "array", "items": {"$ref": "#/$defs/Source"}}
            },
            "additionalProperties": false,
            "$defs": {
                "Cloud": {"type": "object", "properties": {"storms": {"type": "array"}}, "additionalProperties": false},
                "Source": {"oneOf": [
                    {"type": "object", "properties": {"training": {"$ref": "#/$defs/Training"}}, "required": ["training"], "additionalProperties": false},
                    {"type": "object", "properties": {"trace": {"type": "object"}}, "required": ["trace"], "additionalProperties": false}
                ]},
                "Training": {"type": "object", "properties": {"jobs": {"type": "integer"}}, "additionalProperties": false}
            }
        });
        assert!(check(
            json!({"limit": null, "cloud": null, "workloads": [{"trace": {}}]}),
            schema.clone()
        )
        .is_empty());
        let got = check(
            json!({"cloud": {"storm": []}, "workloads": [{"training": {"jobs": "ten"}}, {"trainig": {}}]}),
            schema,
        );
        assert_eq!(
            got,
            [
                "cloud.storm: unknown field (did you mean storms?)",
                "workloads[0].training.jobs: expected an integer, found the string \"ten\"",
                "workloads[1]: expected one of training: {...}, trace: {...} (did you mean training?)",
            ]
        );
    }

    #[test]
    fn an_unquoted_decimal_quantity_is_named() {
        let schema = json!({"type": "object", "properties": {"limits": {"type": "object",
            "additionalProperties": {"x-kubernetes-int-or-string": true}}}});
        let got = check(
            json!({"limits": {"cpu": 0.5, "memory": "1Gi", "nodes": 4}}),
            schema,
        );
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("limits[cpu]: 0.5 must be quoted"),
            "{got:?}"
        );
    }
}
