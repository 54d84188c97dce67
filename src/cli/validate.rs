//! `quartermaster validate FILE...`: checks NodePool and EC2NodeClass YAML
//! files offline with the same validation the controller runs
//! (`api::validate_node_pool`, `api::nodeclass::node_class_problems`) plus
//! what only the CRD schema sees (unknown fields, unquoted decimal
//! quantities), and prints every problem as
//! `FILE: document N (name): path: message`. A valid pool whose instance
//! families have no offerings in `--region` gets a warning line (it still
//! passes: the same pool may serve another region).

use anyhow::Context;
use quartermaster::api::nodeclass::{node_class_problems, NODE_CLASS_KIND};
use quartermaster::api::validate::{families_without_offerings, node_pool_schema_problems};
use quartermaster::api::{validate_node_pool, EC2NodeClass, NodePool};
use quartermaster::catalog::Catalog;
use serde::Deserialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// YAML files holding NodePools and EC2NodeClasses (several documents
    /// per file allowed).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Region whose offerings the pools' families are checked against.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
}

/// Runs `validate`: exit 0 when every document is a valid NodePool, 1 otherwise.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    let mut failed = false;
    for file in &args.files {
        let name = file.display().to_string();
        let lines = match std::fs::read_to_string(file) {
            Ok(text) => check_text(&name, &text, &catalog, &args.region),
            Err(e) => vec![Line::error(format!("{name}: cannot read: {e}"))],
        };
        for line in lines {
            failed |= line.is_error;
            println!("{}", line.text);
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One line of the report.
#[derive(Debug, PartialEq)]
struct Line {
    text: String,
    is_error: bool,
}

impl Line {
    fn error(text: String) -> Line {
        Line {
            text,
            is_error: true,
        }
    }

    fn ok(text: String) -> Line {
        Line {
            text,
            is_error: false,
        }
    }
}

const API_VERSION: &str = "quartermaster.dev/v1alpha1";

/// Checks every document of one file's text.
fn check_text(file: &str, text: &str, catalog: &Catalog, region: &str) -> Vec<Line> {
    let mut out = Vec::new();
    // Pass 1: each document as a plain value, to see its kind and fields.
    let mut values = Vec::new();
    let mut syntax_error = None;
    for doc in serde_norway::Deserializer::from_str(text) {
        match serde_norway::Value::deserialize(doc) {
            Ok(v) => values.push(v),
            Err(e) => {
                // The parser cannot resynchronize after a syntax error.
                let n = values.len() + 1;
                syntax_error = Some(Line::error(format!(
                    "{file}: document {n}: invalid YAML: {e}"
                )));
                break;
            }
        }
    }
    // Pass 2: NodePool documents straight from the text, so that type errors
    // come with their field path and line.
    let mut typed = serde_norway::Deserializer::from_str(text)
        .take(values.len())
        .map(NodePool::deserialize);
    let mut documents = 0;
    for (i, value) in values.iter().enumerate() {
        let parsed = typed.next();
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        documents += 1;
        let n = i + 1;
        let json = match serde_json::to_value(value) {
            Ok(j) => j,
            Err(e) => {
                out.push(Line::error(format!("{file}: document {n}: {e}")));
                continue;
            }
        };
        let name = json
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .unwrap_or("unnamed");
        let at = format!("{file}: document {n} ({name})");
        if is_node_class(&json) {
            out.extend(check_node_class(&at, json));
            continue;
        }
        if let Some(problem) = not_a_node_pool(&json) {
            out.push(Line::error(format!("{at}: {problem}")));
            continue;
        }
        let mut errors: Vec<String> = node_pool_schema_problems(&json)
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut warnings = Vec::new();
        match parsed {
            Some(Ok(pool)) => {
                errors.extend(
                    validate_node_pool(&pool, catalog)
                        .iter()
                        .map(ToString::to_string),
                );
                warnings = families_without_offerings(&pool.spec, catalog, region);
            }
            Some(Err(e)) => errors.push(e.to_string()),
            None => errors.push("could not be read as a NodePool".into()),
        }
        if errors.is_empty() {
            out.push(Line::ok(format!("{at}: ok")));
            out.extend(warnings.iter().map(|f| {
                Line::ok(format!(
                    "{at}: warning: family {f} has no offerings in {region}: the pool launches none of its types there"
                ))
            }));
        }
        out.extend(
            errors
                .into_iter()
                .map(|e| Line::error(format!("{at}: {e}"))),
        );
    }
    out.extend(syntax_error);
    if documents == 0 && out.is_empty() {
        out.push(Line::error(format!("{file}: no YAML documents")));
    }
    out
}

fn is_node_class(json: &serde_json::Value) -> bool {
    json.get("apiVersion").and_then(|v| v.as_str()) == Some(API_VERSION)
        && json.get("kind").and_then(|v| v.as_str()) == Some(NODE_CLASS_KIND)
}

/// The lines of one EC2NodeClass document: `ok`, or each problem
/// (`node_class_problems`, the controller's own checks) with its field path.
fn check_node_class(at: &str, json: serde_json::Value) -> Vec<Line> {
    let class: EC2NodeClass = match serde_json::from_value(json) {
        Ok(c) => c,
        Err(e) => return vec![Line::error(format!("{at}: {e}"))],
    };
    let problems = node_class_problems(&class.spec);
    if problems.is_empty() {
        return vec![Line::ok(format!("{at}: ok"))];
    }
    problems
        .into_iter()
        .map(|(field, why)| Line::error(format!("{at}: spec.{field}: {why}")))
        .collect()
}

/// Why a document is not a NodePool of our API version, if it is not.
fn not_a_node_pool(json: &serde_json::Value) -> Option<String> {
    if !json.is_object() {
        return Some(
            "not a Kubernetes object (expected a mapping with apiVersion and kind)".into(),
        );
    }
    let field = |k: &str| json.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version == API_VERSION && kind == "NodePool" {
        return None;
    }
    if kind == "NodePool" {
        return Some(format!(
            "apiVersion {api_version:?} is not {API_VERSION} (Karpenter NodePools are not Quartermaster NodePools)"
        ));
    }
    if kind.is_empty() {
        return Some("missing kind (expected kind: NodePool)".into());
    }
    Some(format!(
        "kind {kind} ({api_version}) is not a {API_VERSION} NodePool or EC2NodeClass; only those are validated"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(text: &str) -> Vec<String> {
        check_text("f.yaml", text, &Catalog::default(), "us-east-1")
            .into_iter()
            .map(|l| format!("{}{}", if l.is_error { "E " } else { "  " }, l.text))
            .collect()
    }

    const POOL: &str = "apiVersion: quartermaster.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  weight: 1\n";

    #[test]
    fn a_valid_pool_gets_an_ok_line() {
        assert_eq!(report(POOL), ["  f.yaml: document 1 (a): ok"]);
    }

    #[test]
    fn type_errors_carry_the_field_path_and_line() {
        let r = report(&format!("{POOL}  capacityTypes: [spto]\n"));
        assert_eq!(r.len(), 1);
        assert!(
            r[0].starts_with(
                "E f.yaml: document 1 (a): spec.capacityTypes[0]: unknown variant `spto`"
            ),
            "{r:?}"
        );
        assert!(r[0].contains("line 6"), "{r:?}");
        // A type error in one document does not hide the next one.
        let r = report(&format!("{POOL}  risk: heavy\n---\n{POOL}"));
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r[0].contains("spec.risk: invalid type"), "{r:?}");
        assert_eq!(r[1], "  f.yaml: document 2 (a): ok");
    }

    #[test]
    fn other_kinds_empty_documents_and_unknown_fields_are_reported() {
        let text = format!(
            "---\n{POOL}  weigth: 3\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n---\n"
        );
        assert_eq!(
            report(&text),
            [
                "E f.yaml: document 1 (a): spec.weigth: unknown field (did you mean weight?)",
                "E f.yaml: document 2 (c): kind ConfigMap (v1) is not a quartermaster.dev/v1alpha1 NodePool or EC2NodeClass; only those are validated",
            ]
        );
    }

    #[test]
    fn a_syntax_error_stops_the_file_after_reporting_earlier_documents() {
        let r = report(&format!("{POOL}---\na: [1, 2\n---\n{POOL}"));
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0], "  f.yaml: document 1 (a): ok");
        assert!(
            r[1].starts_with("E f.yaml: document 2: invalid YAML:"),
            "{r:?}"
        );
    }

    #[test]
    fn plain_text_and_empty_files_fail() {
        assert!(report("hello world")[0].contains("not a Kubernetes object"));
        assert_eq!(report(""), ["E f.yaml: no YAML documents"]);
    }

    #[test]
    fn a_pool_whose_family_has_no_offerings_in_the_region_passes_with_a_warning() {
        let text = "apiVersion: quartermaster.dev/v1alpha1\nkind: NodePool\nmetadata: {name: v}\n\
                    spec:\n  template: {spec: {requirements: [{key: quartermaster.dev/instance-family, \
                    operator: In, values: [p3, g5]}]}}\n";
        let lines = check_text("f.yaml", text, &Catalog::embedded().unwrap(), "us-east-1");
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "f.yaml: document 1 (v): ok",
                "f.yaml: document 1 (v): warning: family p3 has no offerings in us-east-1: \
                 the pool launches none of its types there"
            ]
        );
        assert!(lines.iter().all(|l| !l.is_error));
    }

    #[test]
    fn node_classes_are_checked_with_their_field_paths() {
        let class = "apiVersion: quartermaster.dev/v1alpha1\nkind: EC2NodeClass\nmetadata: {name: gpu}\nspec:\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  role: nodes\n";
        assert_eq!(report(class), ["  f.yaml: document 1 (gpu): ok"]);
        let bad = class
            .replace(
                "role: nodes",
                "role: nodes\n  amiSelectorTerms: [{alias: al2023@newest}]",
            )
            .replace("[{tags: {a: b}}]\n  role", "[]\n  role");
        let r = report(&bad);
        assert!(
            r.iter()
                .any(|l| l.contains("spec.amiSelectorTerms[0].alias: AMI alias \"al2023@newest\"")),
            "{r:?}"
        );
        assert!(r.iter().any(|l| l.contains("spec.securityGroupSelectorTerms: must have at least one term")), "{r:?}");
    }

    #[test]
    fn karpenter_node_pools_are_named_as_such() {
        let r =
            report("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: k}\nspec: {}\n");
        assert!(r[0].contains("Karpenter NodePools"), "{r:?}");
    }
}
