//! `quartermaster validate FILE...`: checks NodePool and EC2NodeClass YAML
//! files offline with the one strict reader every command and the
//! controller share (`api::read`: the CRD's schema, then the controller's
//! own validation), and DRA objects (every CEL selector compiled:
//! `cluster::dra::check`), and prints every problem as
//! `FILE: document N (name): path: message (line L)`. A valid pool whose instance
//! families have no offerings in `--region` gets a warning line (it still
//! passes: the same pool may serve another region).

use anyhow::Context;
use quartermaster::api::read::{self, Kind};
use quartermaster::api::validate::families_without_offerings;
use quartermaster::catalog::Catalog;
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

/// Checks every document of one file's text with the one strict reader
/// (`api::read`): every problem of every document, each with its line.
fn check_text(file: &str, text: &str, catalog: &Catalog, region: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let (docs, syntax_error) = match read::documents(text) {
        Ok(docs) => (docs, None),
        Err((docs, problem)) => (docs, Some(problem)),
    };
    let all: Vec<&read::Document> = docs.iter().collect();
    let dra = quartermaster::cluster::dra::check::check(&all);
    for doc in &docs {
        let at = format!(
            "{file}: document {} ({})",
            doc.number,
            doc.name().unwrap_or("unnamed")
        );
        if let Some(checked) = dra.get(&doc.number) {
            let line = |p: &read::Problem, what: &str| {
                let p = read::Problem {
                    document: 0,
                    ..p.clone()
                };
                format!("{at}: {what}{p}")
            };
            if checked.problems.is_empty() {
                out.push(Line::ok(format!("{at}: ok")));
            }
            out.extend(checked.problems.iter().map(|p| Line::error(line(p, ""))));
            out.extend(
                checked
                    .warnings
                    .iter()
                    .map(|p| Line::ok(line(p, "warning: "))),
            );
            continue;
        }
        let result = match Kind::of(doc) {
            Kind::EC2NodeClass => read::node_class(doc).map(|_| Vec::new()),
            Kind::NodePool => read::node_pool(doc, catalog)
                .map(|pool| families_without_offerings(&pool.spec, catalog, region)),
            Kind::Karpenter | Kind::Other => Err(vec![Kind::refusal(
                doc,
                "NodePool or EC2NodeClass (or a resource.k8s.io DeviceClass, ResourceClaim or ResourceClaimTemplate); only those are validated",
            )]),
        };
        match result {
            Ok(families) => {
                out.push(Line::ok(format!("{at}: ok")));
                out.extend(families.iter().map(|f| {
                    Line::ok(format!(
                        "{at}: warning: family {f} has no offerings in {region}: the pool launches none of its types there"
                    ))
                }));
            }
            Err(problems) => out.extend(problems.iter().map(|p| {
                // The document is named once, at the start of the line.
                let p = read::Problem {
                    document: 0,
                    ..p.clone()
                };
                Line::error(format!("{at}: {p}"))
            })),
        }
    }
    if let Some(p) = syntax_error {
        out.push(Line::error(format!("{file}: {p}")));
    }
    if docs.is_empty() && out.is_empty() {
        out.push(Line::error(format!("{file}: no YAML documents")));
    }
    out
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
                "E f.yaml: document 1 (a): spec.capacityTypes[0]: the string \"spto\" is not one of spot, on-demand, reserved (did you mean spot?) (line 6)"
            ),
            "{r:?}"
        );
        // A type error in one document does not hide the next one.
        let r = report(&format!("{POOL}  risk: heavy\n---\n{POOL}"));
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r[0].contains("spec.risk: expected a mapping, found the string \"heavy\" (line 6)"),
            "{r:?}"
        );
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
                "E f.yaml: document 1 (a): spec.weigth: unknown field (did you mean weight?) (line 7)",
                "E f.yaml: document 2 (c): kind ConfigMap (v1) is not a quartermaster.dev/v1alpha1 NodePool or EC2NodeClass (or a resource.k8s.io DeviceClass, ResourceClaim or ResourceClaimTemplate); only those are validated (line 9)",
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
    fn dra_objects_have_every_selector_compiled_with_its_path() {
        let text = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\nspec:\n  selectors: [{cel: {expression: \"device.driver ==\"}}]\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: r, namespace: ml}\nspec:\n  devices:\n    requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com}}]\n";
        let r = report(text);
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(
            r[0].starts_with(
                "E f.yaml: document 1 (c): spec.selectors[0].cel.expression: does not compile"
            ),
            "{r:?}"
        );
        assert_eq!(r[1], "  f.yaml: document 2 (r): ok");
        assert!(
            r[2].starts_with("  f.yaml: document 2 (r): warning: spec.devices: DeviceClass gpu.nvidia.com is not defined in these files"),
            "{r:?}"
        );
    }

    #[test]
    fn karpenter_node_pools_are_named_as_such() {
        let r =
            report("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: k}\nspec: {}\n");
        assert!(
            r[0].contains("is Karpenter's: `quartermaster convert`"),
            "{r:?}"
        );
    }
}
