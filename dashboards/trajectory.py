"""The "Trajectory, turn by turn" panel: one kept generation's conversation, read from Loki.

A logs panel, which Grafana renders without plugins and which keeps a line's line breaks. Its
query (``validation_generations.Q_TRAJECTORY``) picks the kept record of one sample id (the
``trajectory`` variable, set by a link on the sample id columns) and makes its line the body's
readable rendering: the prompt's messages (``input``), then the generated turns (``output``), a
paragraph per message, ``[role]`` first, a tool call as ``→ name(arguments) #id``, a tool result as
``[tool #id] ...``, reasoning as ``(thinking) ...`` (``otel_valgen.conversations.render``). A text
prompt or output shows as that text. The record's other fields, among them the messages
themselves as JSON (``gen_ai_input_messages``, ``gen_ai_output_messages``: structured metadata,
each text cut on its own, ``original_length`` on a cut part), are in the line's details.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import logs, loki
from grafana_foundation_sdk.models.common import LogsDedupStrategy, LogsSortOrder
from grafana_foundation_sdk.models.dashboard import GridPos, VariableHide, VariableOption

from dashboards.parts import LOKI

VARIABLE = "trajectory"
TITLE = "Trajectory $trajectory, turn by turn"
# Between the prompt's rendering and the generated turns', in the panel's line.
LINE_FORMAT = '| line_format "{{.input}}\\n\\n--- generated ---\\n{{.output}}"'
DESCRIPTION = (
    "One kept generation, prompt then generated turns, a paragraph per message: [role] first, a tool call as "
    "→ name(arguments) #id, a tool result as [tool #id], reasoning as (thinking). Set the trajectory variable to a "
    "sample id (with or without its part's tag; step narrows it to one step), or click 'Show this trajectory turn "
    "by turn' on a sample id in a table. A text cut to fit keeps its head and tail around a "
    "'…[N characters omitted]…' line. Open a line's details for the messages as JSON (gen_ai_input_messages, "
    "gen_ai_output_messages: every text cut on its own, original_length on a cut part) and its other fields."
)


def variable() -> dashboard_builders.TextBoxVariable:
    """The sample id of the trajectory to show (empty: none)."""
    return (
        dashboard_builders.TextBoxVariable(VARIABLE)
        .label("trajectory")
        .description(
            "A kept generation's sample id (valgen_sample_id, its part's tag optional), shown turn by turn in the "
            "trajectory panel; a regular expression, like the other variables."
        )
        .hide(VariableHide.DONT_HIDE)
        .default_value("")
        .current(VariableOption(text="", value=""))
    )


def panel(panel_id: int, position: GridPos, query: loki.Dataquery) -> logs.Panel:
    """The logs panel showing the lines of ``query`` (``Q_TRAJECTORY``), oldest first, wrapped."""
    return (
        logs.Panel()
        .id(panel_id)
        .title(TITLE)
        .description(DESCRIPTION)
        .grid_pos(position)
        .datasource(LOKI)
        .with_target(query)
        .show_time(True)
        .show_labels(False)
        .show_common_labels(False)
        .wrap_log_message(True)
        .prettify_log_message(False)
        .enable_log_details(True)
        .sort_order(LogsSortOrder.ASCENDING)
        .dedup_strategy(LogsDedupStrategy.NONE)
    )
