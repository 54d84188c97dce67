//! Where each node of a YAML document starts: a map from field paths to
//! line numbers, built from the parser's events, so that a problem found
//! in the parsed value can name the line of the file it comes from.

use super::path::{Path, Segment};
use granit_parser::{Event, Parser};
use std::collections::HashMap;

/// The line (1-based) of every node of one document, by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    at: HashMap<Path, usize>,
}

impl Lines {
    /// The line of the node at `path`, or of its nearest ancestor that has
    /// one (a missing field is reported at its parent).
    pub fn of(&self, path: &Path) -> Option<usize> {
        let mut p = path.clone();
        loop {
            if let Some(line) = self.at.get(&p) {
                return Some(*line);
            }
            if p.is_empty() {
                return None;
            }
            p.pop();
        }
    }
}

/// One open collection while walking the events.
enum Open {
    /// A mapping; `key` is the key whose value comes next, once read.
    Map { key: Option<String> },
    /// A sequence and the index of its next item.
    Seq { next: usize },
}

/// The line index of every document of `text`, in order. Parsing stops at
/// the first syntax error: the documents before it keep their index (the
/// value parser reports the error itself). Anchors and aliases are not
/// followed: an alias's fields have no line of their own.
pub fn index(text: &str) -> Vec<Lines> {
    let mut docs = Vec::new();
    let mut current = Lines::default();
    let mut stack: Vec<Open> = Vec::new();
    let mut path = Path::default();
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { break };
        let line = span.start.line();
        match event {
            Event::DocumentStart(..) => {
                current = Lines::default();
                stack.clear();
                path = Path::default();
            }
            Event::DocumentEnd => docs.push(std::mem::take(&mut current)),
            Event::Scalar(value, ..) => {
                if let Some(Open::Map { key }) = stack.last_mut() {
                    if key.is_none() {
                        // A key: the node it names starts on its line.
                        *key = Some(value.to_string());
                        path.push(Segment::Key(value.to_string()));
                        current.at.entry(path.clone()).or_insert(line);
                        continue;
                    }
                }
                node(&mut stack, &mut path, &mut current, line);
                close(&mut stack, &mut path);
            }
            Event::Alias(_) => {
                node(&mut stack, &mut path, &mut current, line);
                close(&mut stack, &mut path);
            }
            Event::MappingStart(..) => {
                node(&mut stack, &mut path, &mut current, line);
                stack.push(Open::Map { key: None });
            }
            Event::SequenceStart(..) => {
                node(&mut stack, &mut path, &mut current, line);
                stack.push(Open::Seq { next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                close(&mut stack, &mut path);
            }
            _ => {}
        }
    }
    docs
}

/// A value node starts at `line`: a sequence item gets its index on the
/// path; a mapping value already has its key there.
fn node(stack: &mut [Open], path: &mut Path, lines: &mut Lines, line: usize) {
    match stack.last_mut() {
        Some(Open::Seq { next }) => {
            path.push(Segment::Index(*next));
            *next += 1;
            lines.at.entry(path.clone()).or_insert(line);
        }
        Some(Open::Map { .. }) => {}
        None => {
            lines.at.entry(path.clone()).or_insert(line);
        }
    }
}

/// A value node ended: take its segment off the path, and ready the
/// enclosing mapping for its next key.
fn close(stack: &mut [Open], path: &mut Path) {
    let leaves = match stack.last_mut() {
        Some(Open::Seq { .. }) => true,
        Some(Open::Map { key }) => key.take().is_some(),
        None => false,
    };
    if leaves {
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(lines: &Lines, path: &str) -> Option<usize> {
        lines.of(&Path::parse(path))
    }

    #[test]
    fn every_key_and_item_of_block_and_flow_yaml_has_its_line() {
        let text = "\
apiVersion: v1
spec:
  limits: {nvidia.com/gpu: 8, cpu: '64'}
  requirements:
  - key: a
    values: [x,
      y]
  - {key: b}
";
        let docs = index(text);
        assert_eq!(docs.len(), 1);
        let l = &docs[0];
        assert_eq!(line(l, "apiVersion"), Some(1));
        assert_eq!(line(l, "spec"), Some(2));
        assert_eq!(line(l, "spec.limits[cpu]"), Some(3));
        assert_eq!(line(l, "spec.requirements[0]"), Some(5));
        assert_eq!(line(l, "spec.requirements[0].values[1]"), Some(7));
        assert_eq!(line(l, "spec.requirements[1].key"), Some(8));
        // A field that is not there is placed at its nearest ancestor.
        assert_eq!(line(l, "spec.requirements[1].operator"), Some(8));
        assert_eq!(line(l, "spec.weight"), Some(2));
    }

    #[test]
    fn documents_keep_their_own_lines_and_a_syntax_error_ends_the_index() {
        let docs = index("a: 1\n---\nb:\n  c: 2\n---\nd: [1, 2\n");
        assert_eq!(docs.len(), 2, "the broken third document has no index");
        assert_eq!(line(&docs[1], "b.c"), Some(4));
        assert_eq!(line(&docs[0], "a"), Some(1));
        assert_eq!(line(&docs[1], "b"), Some(3));
    }
}
