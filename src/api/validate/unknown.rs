//! What the API server's schema rejects or drops that typed deserialization
//! lets through: unknown fields (pruned silently, or rejected under strict
//! field validation), named here with a suggestion when a known field is
//! spelled alike; and unquoted decimals where a quantity must be an integer
//! or a string.

use super::syntax::distance;
use super::FieldError;
use crate::api::NodePool;
use kube::core::CustomResourceExt;
use serde_json::Value;

/// Problems of a NodePool object (as JSON) that only its CRD schema sees:
/// fields it does not define, e.g. `spec.prewarm[0].timezone` (did you mean
/// `timeZone`?), and decimals written as numbers where the schema wants an
/// integer or a string (`costPerHour: 99.5` must be `"99.5"`).
/// `apiVersion`, `kind`, `metadata` and `status` are not looked into.
pub fn node_pool_schema_problems(object: &Value) -> Vec<FieldError> {
    let crd = NodePool::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(serde_json::to_value)
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    let mut out = Vec::new();
    let Some(fields) = object.as_object() else {
        return out;
    };
    for (k, v) in fields {
        match k.as_str() {
            "apiVersion" | "kind" | "metadata" | "status" => {}
            _ => match schema.pointer(&format!("/properties/{k}")) {
                Some(s) => walk(v, s, k, &mut out),
                None => out.push(unknown(k, k, &schema)),
            },
        }
    }
    out
}

fn walk(value: &Value, schema: &Value, path: &str, out: &mut Vec<FieldError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(fields) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            for (k, v) in fields {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    walk(v, s, &format!("{path}.{k}"), out);
                } else if let Some(s) = extra {
                    walk(v, s, &format!("{path}[{k}]"), out);
                } else if props.is_some() {
                    out.push(unknown(&format!("{path}.{k}"), k, schema));
                }
            }
        }
        Value::Number(n)
            if n.is_f64()
                && schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) =>
        {
            out.push(FieldError::new(
                path,
                format!("{n} must be quoted (\"{n}\"): the API server takes an integer or a string here"),
            ));
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(v, s, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn unknown(path: &str, key: &str, schema: &Value) -> FieldError {
    let known: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let hint = known
        .iter()
        .map(|k| {
            (
                distance(&k.to_ascii_lowercase(), &key.to_ascii_lowercase()),
                *k,
            )
        })
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    FieldError::new(path, format!("unknown field{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_misspelled_fields_and_suggests_the_known_one() {
        let pool = json!({
            "apiVersion": "quartermaster.dev/v1alpha1",
            "kind": "NodePool",
            "metadata": { "name": "a", "labels": { "x": "y" } },
            "spec": {
                "capacityType": ["spot"],
                "limits": { "nvidia.com/gpu": 8 },
                "prewarm": [{ "name": "w", "schedule": "@daily", "timezone": "UTC",
                              "duration": "1h", "capacity": { "cpu": 1 } }],
                "template": { "spec": { "requirements": [
                    { "key": "k", "operator": "In", "values": ["v"], "minValues": 2 }
                ] } }
            },
            "status": { "anything": 1 }
        });
        let errs: Vec<String> = node_pool_schema_problems(&pool)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            [
                "spec.capacityType: unknown field (did you mean capacityTypes?)",
                "spec.prewarm[0].timezone: unknown field (did you mean timeZone?)",
                "spec.template.spec.requirements[0].minValues: unknown field",
            ]
        );
    }

    #[test]
    fn unquoted_decimal_quantities_are_named() {
        let pool = json!({ "spec": { "limits": { "costPerHour": 99.5, "nodes": 4 },
                                     "prewarm": [{ "capacity": { "cpu": 0.5 } }] } });
        let errs: Vec<String> = node_pool_schema_problems(&pool)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("spec.limits[costPerHour]: 99.5 must be quoted"));
        assert!(errs[1].starts_with("spec.prewarm[0].capacity[cpu]: 0.5 must be quoted"));
    }

    #[test]
    fn a_known_pool_has_no_unknown_fields() {
        let pool = json!({ "spec": { "gpuSharing": { "mode": "Mig", "migProfile": "1g.10gb" },
                                     "limits": { "costPerHour": "10" } } });
        assert!(node_pool_schema_problems(&pool).is_empty());
    }
}
