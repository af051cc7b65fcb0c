//! The objects every source currently holds, keyed by source then object. Plain data
//! with `replace / apply / delete`, no I/O, so the rules of combining sources are tested
//! without files or a cluster.

use std::collections::BTreeMap;

use crate::crd::{Object, ObjectKey};

#[derive(Debug, Clone, Default)]
pub struct Index {
    sources: BTreeMap<String, BTreeMap<ObjectKey, Object>>,
}

impl Index {
    /// Replaces everything one source holds (a full file scan, or a relist).
    pub fn replace(&mut self, source: &str, objects: Vec<Object>) {
        let map = objects.into_iter().map(|o| (o.key.clone(), o)).collect();
        self.sources.insert(source.to_string(), map);
    }

    pub fn apply(&mut self, source: &str, object: Object) {
        self.sources
            .entry(source.to_string())
            .or_default()
            .insert(object.key.clone(), object);
    }

    pub fn delete(&mut self, source: &str, key: &ObjectKey) {
        if let Some(map) = self.sources.get_mut(source) {
            map.remove(key);
        }
    }

    pub fn has_source(&self, source: &str) -> bool {
        self.sources.contains_key(source)
    }

    /// Every object of every source, in a stable order.
    pub fn objects(&self) -> Vec<Object> {
        self.sources
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;

    fn mk_object(name: &str) -> Object {
        let text = format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: {name}}}\nspec: {{tool: {name}}}\n"
        );
        parse_documents("t", &text).0.remove(0)
    }

    #[test]
    fn sources_are_kept_apart() {
        let mut index = Index::default();
        index.replace("files", vec![mk_object("a")]);
        index.apply("cluster", mk_object("b"));
        assert_eq!(index.objects().len(), 2);
        index.replace("files", vec![]);
        assert_eq!(index.objects().len(), 1);
        index.delete("cluster", &mk_object("b").key);
        assert!(index.objects().is_empty());
        assert!(index.has_source("cluster"));
    }
}
