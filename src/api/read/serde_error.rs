//! serde's error messages said in YAML's words: `invalid type: string
//! "lots", expected i32` becomes `expected an integer, found the string
//! "lots"`; Rust type names (`i32`, `u64`, `a sequence`, `struct X`) become
//! what a person writing YAML knows (an integer, a list, a mapping).

use super::schema::did_you_mean;

/// A serde_path_to_error path in the reader's form (`a.b[0][k]`).
pub fn path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment as S;
    let mut out = String::new();
    for s in p.iter() {
        match s {
            S::Seq { index } => out.push_str(&format!("[{index}]")),
            S::Map { key } | S::Enum { variant: key } => {
                let field = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                    && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if field {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                } else {
                    out.push_str(&format!("[{key}]"));
                }
            }
            S::Unknown => {}
        }
    }
    out
}

/// serde's message with Rust's words replaced by YAML's.
pub fn message(m: &str) -> String {
    let m = strip_location(m);
    if let Some(rest) = m.strip_prefix("invalid type: ") {
        if let Some((got, want)) = rest.split_once(", expected ") {
            return format!("expected {}, found {}", expected(want), found(got));
        }
    }
    if let Some(rest) = m.strip_prefix("invalid value: ") {
        if let Some((got, want)) = rest.split_once(", expected ") {
            return match int_range(want.trim()) {
                Some(range) => format!(
                    "{} is out of range: expected an integer {range}",
                    found(got)
                ),
                None => format!("{} is not {}", found(got), expected(want)),
            };
        }
    }
    if let Some(rest) = m.strip_prefix("unknown variant `") {
        if let Some((got, want)) = rest.split_once("`, expected ") {
            let names: Vec<&str> = want
                .trim_start_matches("one of ")
                .split(", ")
                .map(|s| s.trim_matches('`'))
                .collect();
            let hint = did_you_mean(got, names.iter().copied()).unwrap_or_default();
            return format!("{got:?} is not one of {}{hint}", names.join(", "));
        }
    }
    if let Some(rest) = m.strip_prefix("missing field `") {
        return format!("required field {} is missing", rest.trim_end_matches('`'));
    }
    m.to_string()
}

/// The message without serde_norway's ` at line N column M` (the reader
/// gives the line itself).
pub fn strip_location(m: &str) -> &str {
    match m.rfind(" at line ") {
        Some(i) if m[i..].contains(" column ") => &m[..i],
        _ => m,
    }
}

fn expected(want: &str) -> String {
    let w = want.trim();
    match w {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64" | "u128"
        | "usize" | "an integer" => "an integer".into(),
        "f32" | "f64" | "a number" => "a number".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a sequence" | "a list" => "a list".into(),
        "a string" | "a borrowed string" | "a str" => "a string".into(),
        "a map" => "a mapping".into(),
        w if w.starts_with("struct ") || w.starts_with("a map") => "a mapping".into(),
        w if w.starts_with("a sequence") || w.starts_with("a tuple") => "a list".into(),
        w if w.starts_with("enum ") || w.starts_with("variant identifier") => {
            "one of the documented values".into()
        }
        w => w.to_string(),
    }
}

/// The values a Rust integer type holds, as a person says them.
fn int_range(t: &str) -> Option<&'static str> {
    Some(match t {
        "u8" => "from 0 to 255",
        "u16" => "from 0 to 65535",
        "u32" => "from 0 to 4294967295",
        "u64" | "u128" | "usize" => "of 0 or more",
        "i8" => "from -128 to 127",
        "i16" => "from -32768 to 32767",
        "i32" => "from -2147483648 to 2147483647",
        _ => return None,
    })
}

fn found(got: &str) -> String {
    let g = got.trim();
    if let Some(s) = g.strip_prefix("string ") {
        return format!("the string {s}");
    }
    for p in ["integer ", "floating point "] {
        if let Some(n) = g.strip_prefix(p) {
            return format!("the number {}", n.trim_matches('`'));
        }
    }
    if let Some(b) = g.strip_prefix("boolean ") {
        return b.trim_matches('`').to_string();
    }
    match g {
        "map" => "a mapping".into(),
        "sequence" => "a list".into(),
        "unit value" | "null" => "nothing (null)".into(),
        g => g.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_words_become_yaml_words() {
        assert_eq!(
            message("invalid type: string \"lots\", expected i32"),
            "expected an integer, found the string \"lots\""
        );
        assert_eq!(
            message("invalid type: map, expected a sequence at line 3 column 5"),
            "expected a list, found a mapping"
        );
        assert_eq!(
            message("unknown variant `spto`, expected one of `spot`, `on-demand`, `reserved`"),
            "\"spto\" is not one of spot, on-demand, reserved (did you mean spot?)"
        );
        assert_eq!(
            message("invalid value: integer `-1`, expected u32"),
            "the number -1 is out of range: expected an integer from 0 to 4294967295"
        );
        assert_eq!(
            message("missing field `name`"),
            "required field name is missing"
        );
        assert_eq!(message("something custom"), "something custom");
    }
}
