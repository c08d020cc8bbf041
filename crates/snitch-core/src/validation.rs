//! Validation problems, reported all at once as `{attribute, message}` pairs.

use std::fmt;

/// One problem with one attribute of a request, e.g. `name`: `can't be blank`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// The attribute at fault, e.g. `name`.
    pub attribute: String,
    /// What is wrong with it, e.g. `can't be blank`.
    pub message: String,
}

impl Validation {
    /// A problem with `attribute`.
    pub fn new(attribute: impl Into<String>, message: impl Into<String>) -> Self {
        Validation {
            attribute: attribute.into(),
            message: message.into(),
        }
    }
}

/// Every problem found in a request; never empty when returned as an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validations(Vec<Validation>);

impl Validations {
    /// No problems yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One problem.
    pub fn single(attribute: impl Into<String>, message: impl Into<String>) -> Self {
        Validations(vec![Validation::new(attribute, message)])
    }

    /// Adds a problem.
    pub fn push(&mut self, attribute: impl Into<String>, message: impl Into<String>) {
        self.0.push(Validation::new(attribute, message));
    }

    /// Keeps the value of a parse, or records its problem and gives `None`.
    pub fn check<T>(&mut self, result: Result<T, Validation>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(problem) => {
                self.0.push(problem);
                None
            }
        }
    }

    /// Adds every problem of `other`.
    pub fn extend(&mut self, other: Validations) {
        self.0.extend(other.0);
    }

    /// Whether there is no problem.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in the order found.
    pub fn iter(&self) -> impl Iterator<Item = &Validation> {
        self.0.iter()
    }

    /// `Ok(())` when nothing was found, else every problem as the error.
    pub fn into_result(self) -> Result<(), Validations> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl IntoIterator for Validations {
    type Item = Validation;
    type IntoIter = std::vec::IntoIter<Validation>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl From<Validation> for Validations {
    fn from(v: Validation) -> Self {
        Validations(vec![v])
    }
}

impl fmt::Display for Validations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for v in &self.0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{} {}", v.attribute, v.message)?;
        }
        Ok(())
    }
}
