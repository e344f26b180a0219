"""Key rotation: ``archive rekey`` re-encrypts every encrypted object to new recipients."""
