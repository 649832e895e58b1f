"""Tables, figures and provenance records."""
