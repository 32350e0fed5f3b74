"""Optional integrations (TensorBoard). Each imports its third-party package only when used."""
