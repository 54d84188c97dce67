//! Field paths as the reader writes them: `spec.template.spec.requirements[0].key`,
//! with map keys that are data rather than field names in brackets
//! (`spec.limits[nvidia.com/gpu]`), the form [`crate::api::FieldError`] uses.

use std::fmt;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A path from a document's root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Path(Vec<Segment>);

impl Path {
    /// The path with one more step.
    pub fn push(&mut self, s: Segment) {
        self.0.push(s);
    }

    /// Drops the last step.
    pub fn pop(&mut self) {
        self.0.pop();
    }

    /// Its steps from the root.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Whether `prefix` is this path or one of its ancestors.
    pub fn starts_with(&self, prefix: &Path) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// Whether this is the root.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The path one key further down.
    pub fn key(&self, k: &str) -> Path {
        let mut p = self.clone();
        p.push(Segment::Key(k.to_string()));
        p
    }

    /// The path one index further down.
    pub fn index(&self, i: usize) -> Path {
        let mut p = self.clone();
        p.push(Segment::Index(i));
        p
    }

    /// Reads a rendered path back: dots separate keys, brackets hold
    /// indices (all digits) or keys that are data (`[nvidia.com/gpu]`).
    /// Text after the path (a FieldError's `: message`) must be cut off
    /// first.
    pub fn parse(s: &str) -> Path {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut chars = s.chars().peekable();
        let flush = |word: &mut String, out: &mut Vec<Segment>| {
            if !word.is_empty() {
                out.push(Segment::Key(std::mem::take(word)));
            }
        };
        while let Some(c) = chars.next() {
            match c {
                '.' => flush(&mut word, &mut out),
                '[' => {
                    flush(&mut word, &mut out);
                    let mut inner = String::new();
                    let mut depth = 1;
                    for c in chars.by_ref() {
                        match c {
                            '[' => depth += 1,
                            ']' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        inner.push(c);
                    }
                    out.push(match inner.parse::<usize>() {
                        Ok(i) if !inner.starts_with('+') => Segment::Index(i),
                        _ => Segment::Key(inner),
                    });
                }
                c => word.push(c),
            }
        }
        flush(&mut word, &mut out);
        Path(out)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Index(n) => write!(f, "[{n}]")?,
                // A key that reads as a field name joins with a dot;
                // anything else (a label, a resource name) goes in brackets.
                Segment::Key(k) if is_field_name(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{k}]")?,
            }
        }
        Ok(())
    }
}

/// `camelCase` words: what a schema's field names look like.
fn is_field_name(k: &str) -> bool {
    k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reads_back_as_it_was_written() {
        for s in [
            "spec.template.spec.requirements[0].values[1]",
            "spec.limits[nvidia.com/gpu]",
            "spec.template.metadata.labels[team.example.com/x]",
            "nodePools[2].spec.weight",
        ] {
            assert_eq!(Path::parse(s).to_string(), s);
        }
        assert_eq!(
            Path::parse("a[3]"),
            Path(vec![Segment::Key("a".into()), Segment::Index(3)])
        );
    }
}
