"""import-linter contract types of our own (registered in pyproject's [tool.importlinter] contract_types).

``allowlist``: a package may import only itself, the standard library and the packages listed, so a new
dependency of the RocketMQ client is a decision (a deny-list lets anything new through).
"""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, fields, output


class AllowListContract(Contract):
    type_name = "allowlist"

    source_package = fields.StringField()
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        source = str(self.source_package)
        allowed = {str(m) for m in (self.allowed_modules or [])}  # type: ignore[attr-defined]
        illegal: list[tuple[str, str, list[int]]] = []
        for importer in sorted({source, *graph.find_descendants(source)}):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                top = imported.split(".")[0]
                own = imported == source or imported.startswith(source + ".")
                if own or top in sys.stdlib_module_names or top in allowed:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                illegal.append((importer, imported, [d["line_number"] for d in details]))
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        allowed = ", ".join(sorted(str(m) for m in (self.allowed_modules or [])))  # type: ignore[attr-defined]
        output.print_error(f"{self.source_package} may import only itself, the stdlib and: {allowed}")
        output.new_line()
        for importer, imported, lines in check.metadata["illegal"]:
            output.print_error(f"- {importer} -> {imported} (l. {', '.join(map(str, lines))})", bold=False)
        output.new_line()
