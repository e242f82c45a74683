"""What a guarantee is: requirements, DPS accounting, attacks, privacy reports, audit checks."""
