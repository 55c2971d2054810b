//! Diagnosis: evidence from samples, pure rules, findings and a verdict.
