//! The one strict reader of every file Quartermaster reads: NodePools and
//! EC2NodeClasses (`validate`, `plan`, scenario files), scenario files
//! (`simulate`), reservation lists, the controller's EC2 settings and
//! Karpenter's files (`convert`). A file is split into YAML documents; each
//! is checked against its schema before it is read (every unknown or
//! misspelt field with a did-you-mean, every wrong type said in YAML's
//! words, all at once, each with the line it is on); then read into its
//! type; then checked for what a schema cannot say (the same validation
//! the controller runs). Nothing is silently dropped or widened: a document
//! with a problem is not used.

mod kinds;
mod lines;
mod path;
mod schema;
mod serde_error;

pub use kinds::{node_class, node_class_schema, node_pool, node_pool_schema, Kind, API_VERSION};

pub use lines::Lines;
pub use path::{Path, Segment};
pub use schema::{did_you_mean, found};

use super::FieldError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::fmt;

/// One problem of a file: which document, where in it, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The document's number in its file (1-based); 0 for the file itself.
    pub document: usize,
    /// The document's `metadata.name` (or a scenario's `name`), if any.
    pub name: Option<String>,
    /// The field path, e.g. `spec.template.spec.requirements[0].key`;
    /// empty for a problem of the whole document.
    pub path: String,
    /// The line of the file the field is on (1-based), when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.document > 0 {
            write!(f, "document {}", self.document)?;
            if let Some(n) = &self.name {
                write!(f, " ({n})")?;
            }
            f.write_str(": ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(l) = self.line {
            write!(f, " (line {l})")?;
        }
        Ok(())
    }
}

/// Problems of one file, shown one per line as `FILE: problem`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.file, .problems))]
pub struct Error {
    /// The file's name as the user gave it.
    pub file: String,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

fn render(file: &str, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("{file}: {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One YAML document of a file: its value and where its fields are.
#[derive(Debug, Clone)]
pub struct Document {
    /// Its number in the file (1-based).
    pub number: usize,
    /// The parsed value (YAML read as JSON values: mappings with string keys).
    pub value: Value,
    lines: Lines,
}

impl Document {
    /// `apiVersion` and `kind`, empty where absent.
    pub fn kind(&self) -> (&str, &str) {
        let field = |k: &str| self.value.get(k).and_then(Value::as_str).unwrap_or("");
        (field("apiVersion"), field("kind"))
    }

    /// `metadata.name`, or a top-level `name` (scenario files).
    pub fn name(&self) -> Option<&str> {
        self.value
            .pointer("/metadata/name")
            .or_else(|| self.value.get("name"))
            .and_then(Value::as_str)
    }

    /// The line a rendered path (`spec.limits[cpu]`) is on, or its nearest
    /// ancestor's.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        self.lines.of(&Path::parse(path))
    }

    /// A problem at a rendered path of this document.
    pub fn problem(&self, path: &str, message: impl Into<String>) -> Problem {
        Problem {
            document: self.number,
            name: self.name().map(str::to_string),
            path: path.to_string(),
            line: self.line_of(path),
            message: message.into(),
        }
    }

    /// A [`FieldError`] of this document as a [`Problem`], with its line.
    pub fn at(&self, e: &FieldError) -> Problem {
        self.problem(&e.path, &e.message)
    }

    /// A problem given as `path: message` text (the form the scenario
    /// checks write), with its line.
    pub fn from_text(&self, text: &str) -> Problem {
        match text.split_once(": ") {
            Some((path, message)) if !path.contains(' ') => self.problem(path, message),
            _ => self.problem("", text),
        }
    }

    /// Reads the document as `T` after checking it against `schema` (an
    /// OpenAPI v3 or JSON schema whose `$ref`s resolve within itself).
    ///
    /// # Errors
    /// Every problem the schema finds, in file order; or, should the
    /// schema let through what `T` refuses, that one problem with its path.
    pub fn read<T: DeserializeOwned>(&self, schema: &Value) -> Result<T, Vec<Problem>> {
        self.read_checked(schema, |_: &T| Vec::new())
    }

    /// [`Document::read`], then `validate` on what was read: the problems
    /// of both, every one, in file order. The value is read even when the
    /// schema finds a problem that does not stop it (a range, a length),
    /// so that its other problems are found too; where the schema and
    /// `validate` name the same field, `validate`'s words are kept.
    ///
    /// # Errors
    /// Every problem found.
    pub fn read_checked<T: DeserializeOwned>(
        &self,
        schema: &Value,
        validate: impl FnOnce(&T) -> Vec<Problem>,
    ) -> Result<T, Vec<Problem>> {
        let from_schema: Vec<Problem> =
            schema::problems(&self.value, schema, schema, &Path::default())
                .iter()
                .map(|e| self.at(e))
                .collect();
        let value = serde_path_to_error::deserialize::<_, T>(&self.value).map_err(|e| {
            let path = serde_error::path(e.path());
            let message = serde_error::message(&e.inner().to_string());
            self.problem(&path, message)
        });
        match value {
            Err(p) if from_schema.is_empty() => Err(vec![p]),
            Err(_) => Err(self.sorted(from_schema)),
            Ok(v) => {
                let checked = validate(&v);
                if from_schema.is_empty() && checked.is_empty() {
                    return Ok(v);
                }
                let mut all: Vec<Problem> = from_schema
                    .into_iter()
                    .filter(|p| !checked.iter().any(|c| c.path == p.path))
                    .collect();
                all.extend(checked);
                Err(self.sorted(all))
            }
        }
    }

    /// Sets `value` at `path`, making the mappings on the way that the
    /// document leaves out (a `risk:` a NodePool does not have); what is
    /// set is checked when the document is read, as if the file said it.
    ///
    /// # Errors
    /// A step that cannot be taken: a key into something that is not a
    /// mapping, an index into something that is not a list or past its
    /// end. The message names the path up to that step.
    pub fn set(&mut self, path: &Path, value: Value) -> Result<(), String> {
        let mut here = &mut self.value;
        let mut walked = Path::default();
        for step in path.segments() {
            let name = || match walked.is_empty() {
                true => "the document".to_string(),
                false => walked.to_string(),
            };
            if here.is_null() && matches!(step, Segment::Key(_)) {
                *here = Value::Object(serde_json::Map::new());
            }
            here = match (step, here) {
                (Segment::Key(k), Value::Object(m)) => m.entry(k.clone()).or_insert(Value::Null),
                (Segment::Index(i), Value::Array(items)) => {
                    let n = items.len();
                    items
                        .get_mut(*i)
                        .ok_or_else(|| format!("{} has {n} items, none at [{i}]", name()))?
                }
                (Segment::Key(k), other) => {
                    return Err(format!(
                        "{} is {}, not a mapping with {k:?}",
                        name(),
                        found(other)
                    ))
                }
                (Segment::Index(_), other) => {
                    return Err(format!("{} is {}, not a list", name(), found(other)))
                }
            };
            walked.push(step.clone());
        }
        *here = value;
        Ok(())
    }

    /// What `schema` says of this document at `at` and on the way to it
    /// (a misspelt field there, with its did-you-mean; a value of the
    /// wrong type or out of range), leaving out the rest of the document.
    pub fn problems_at(&self, schema: &Value, at: &Path) -> Vec<FieldError> {
        schema::problems(&self.value, schema, schema, &Path::default())
            .into_iter()
            .filter(|e| {
                let p = Path::parse(&e.path);
                at.starts_with(&p) || p.starts_with(at)
            })
            .collect()
    }

    /// Problems in the order of the file's lines (then paths), whatever
    /// order the checks found them in.
    pub fn sorted(&self, mut problems: Vec<Problem>) -> Vec<Problem> {
        problems.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
        problems.dedup();
        problems
    }
}

/// Splits `text` into its YAML documents; empty documents (a trailing
/// `---`) are left out.
///
/// # Errors
/// A YAML syntax error, with its document number and line; documents
/// after it cannot be read (the parser cannot resynchronise).
pub fn documents(text: &str) -> Result<Vec<Document>, (Vec<Document>, Problem)> {
    let lines = lines::index(text);
    let mut docs = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        match Value::deserialize(doc) {
            Ok(Value::Null) => {}
            Ok(value) => docs.push(Document {
                number: i + 1,
                value,
                lines: lines.get(i).cloned().unwrap_or_default(),
            }),
            Err(e) => {
                let line = e.location().map(|l| l.line());
                let message = format!(
                    "invalid YAML: {}",
                    serde_error::strip_location(&e.to_string())
                );
                return Err((
                    docs,
                    Problem {
                        document: i + 1,
                        name: None,
                        path: String::new(),
                        line,
                        message,
                    },
                ));
            }
        }
    }
    Ok(docs)
}

/// The JSON schema of a type (its `schemars` derive), as the reader
/// checks documents against it.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// A file that holds one document of type `T` (a scenario, a reservation
/// list, settings), read strictly against `schema`; `validate` adds what
/// the schema cannot say, as `path: message` texts.
///
/// # Errors
/// Every problem of the file, with its line, under the file's name.
pub fn single<T: DeserializeOwned>(
    file: &str,
    text: &str,
    schema: &Value,
    validate: impl FnOnce(&T) -> Vec<String>,
) -> Result<T, Error> {
    read_single(file, &single_document(file, text)?, schema, validate)
}

/// The one YAML document of a file, not yet checked: for a caller that
/// changes it ([`Document::set`]) before [`read_single`] reads it.
///
/// # Errors
/// A YAML syntax error, or a file of more or fewer than one document.
pub fn single_document(file: &str, text: &str) -> Result<Document, Error> {
    let fail = |problems: Vec<Problem>| Error {
        file: file.to_string(),
        problems,
    };
    let mut docs = documents(text).map_err(|(_, p)| fail(vec![p]))?;
    if docs.len() != 1 {
        return Err(fail(vec![Problem {
            document: 0,
            name: None,
            path: String::new(),
            line: None,
            message: format!("expected one YAML document, found {}", docs.len()),
        }]));
    }
    Ok(docs.remove(0))
}

/// [`single`] of a document [`single_document`] gave.
///
/// # Errors
/// Every problem of the document, with its line, under the file's name.
pub fn read_single<T: DeserializeOwned>(
    file: &str,
    doc: &Document,
    schema: &Value,
    validate: impl FnOnce(&T) -> Vec<String>,
) -> Result<T, Error> {
    doc.read_checked(schema, |v: &T| {
        validate(v).iter().map(|t| doc.from_text(t)).collect()
    })
    .map_err(|problems| Error {
        file: file.to_string(),
        // One document: its number says nothing.
        problems: problems
            .into_iter()
            .map(|p| Problem { document: 0, ..p })
            .collect(),
    })
}

/// The schema of a Kubernetes object of a CRD: the CRD's own schema of
/// `spec` and `status`, with `apiVersion`, `kind` and `metadata` as the API
/// server reads them (`status` is not looked into: files copied from a
/// cluster carry one).
pub fn object_schema(crd_schema: &Value) -> Value {
    let mut s = crd_schema.clone();
    let meta_fields = [
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "generation",
        "managedFields",
        "namespace",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
        "uid",
    ];
    let mut meta = serde_json::Map::new();
    for f in meta_fields {
        meta.insert(f.into(), json!({}));
    }
    meta.insert("name".into(), json!({"type": "string"}));
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    meta.insert("labels".into(), string_map.clone());
    meta.insert("annotations".into(), string_map);
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("apiVersion".into(), json!({"type": "string"}));
        props.insert("kind".into(), json!({"type": "string"}));
        props.insert(
            "metadata".into(),
            json!({"type": "object", "properties": meta}),
        );
        props.insert("status".into(), json!({}));
    }
    s
}

/// The OpenAPI schema of a CRD type's objects (see [`object_schema`]).
pub fn crd_schema<K: kube::core::CustomResourceExt>() -> Value {
    let crd = K::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    object_schema(&schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodePool;

    const POOL: &str = "\
apiVersion: quartermaster.dev/v1alpha1
kind: NodePool
metadata:
  name: training
spec:
  weight: lots
  template:
    spec:
      requirments:
      - {key: a, operator: In, values: [b]}
  limits: {cpu: 0.5}
";

    #[test]
    fn a_document_is_refused_with_every_problem_its_path_and_line() {
        let docs = documents(POOL).unwrap();
        let schema = crd_schema::<NodePool>();
        let problems: Vec<String> = docs[0]
            .read::<NodePool>(&schema)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "document 1 (training): spec.weight: expected an integer, found the string \"lots\" (line 6)",
                "document 1 (training): spec.template.spec.requirments: unknown field (did you mean requirements?) (line 9)",
                "document 1 (training): spec.limits[cpu]: 0.5 must be quoted (\"0.5\"): an integer or a string is expected here (line 11)",
            ]
        );
    }

    #[test]
    fn a_clean_document_reads_into_its_type() {
        let text = POOL
            .replace("weight: lots", "weight: 3")
            .replace("requirments", "requirements")
            .replace("cpu: 0.5", "cpu: \"0.5\"");
        let docs = documents(&text).unwrap();
        let pool: NodePool = docs[0].read(&crd_schema::<NodePool>()).unwrap();
        assert_eq!(pool.spec.weight, Some(3));
        assert_eq!(pool.spec.template.spec.requirements.len(), 1);
    }

    #[test]
    fn a_syntax_error_names_its_document_and_line_and_keeps_the_documents_before() {
        let (docs, p) = documents("a: 1\n---\nb: [1, 2\nc: 3\n").unwrap_err();
        assert_eq!(docs.len(), 1);
        assert_eq!(p.document, 2);
        assert!(p.message.starts_with("invalid YAML"), "{p}");
        assert!(p.line.is_some_and(|l| l >= 3), "{p:?}");
        assert!(documents("---\n---\na: 1\n---\n").unwrap().len() == 1);
    }
}
