from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core import display
from core.audit import AuditAction, audit_record, model_snapshot, snapshot_diff
from core.errors import DomainError
from core.models import AuditEntry, Lease

# --- Columns and fields that read as figures --------------------------------------
# Each factory returns a display function for `list_display`, `fields` or
# `fieldsets`. Their names start with the kind (`usd_`, `json_`), which the
# admin stylesheet (core/static/core/admin.css) aligns and wraps by.

# A display function takes the row's or page's object and returns what the cell shows. The factories
# are typed as returning Any: django-stubs types `fields`, `fieldsets` and `readonly_fields` as field
# names only, while the admin takes a display function in them too (shown read-only).
DisplayFunction = Any


def display_function(**options: Any) -> Callable[[Callable[..., Any]], DisplayFunction]:
    """`admin.display(**options)` for a function that stands in `fields` (see DisplayFunction)."""
    decorate: Callable[[Callable[..., Any]], DisplayFunction] = admin.display(**options)
    return decorate


def usd_display(field: str, description: str) -> DisplayFunction:
    """A USD field as `1,715.00`, sortable by the field."""

    @admin.display(description=description, ordering=field)
    def show(obj: Any) -> str:
        return display.usd(getattr(obj, field))

    show.__name__ = f"usd_{field}"
    return show


def percent_display(field: str, description: str) -> DisplayFunction:
    @admin.display(description=description, ordering=field)
    def show(obj: Any) -> str:
        return display.percent(getattr(obj, field))

    show.__name__ = f"pct_{field}"
    return show


def json_display(field: str, description: str) -> DisplayFunction:
    """A JSONField as a table (core.display.json_table)."""

    @admin.display(description=description)
    def show(obj: Any) -> SafeString:
        return display.json_table(getattr(obj, field))

    show.__name__ = f"json_{field}"
    return show


class ReadOnlyInline(admin.TabularInline[Any, Any]):
    """An inline staff can read but not change: records that are never edited.
    Its rows show their fields and a link to the record, without repeating the
    record's name in a first column (templates/admin/edit_inline/tabular_record.html)."""

    template = "admin/edit_inline/tabular_record.html"
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


def _declared_fields(model_admin: admin.ModelAdmin[Any], request: HttpRequest, obj: Model | None = None) -> list[Any]:
    """What a read-only page shows: its fieldsets or fields, else every field."""
    if model_admin.fieldsets:
        return flatten_fieldsets(model_admin.get_fieldsets(request, obj))
    if model_admin.fields:
        return list(model_admin.fields)
    return [f.name for f in model_admin.model._meta.fields]


class ReadablePageMixin(admin.ModelAdmin[Any]):
    """A read-only page laid out by `fieldsets`, where fields can be shown
    through display functions (whole coins beside base units, JSON as
    tables). Model fields the fieldsets do not mention, and `shown_otherwise`
    does not account for, are added in a last "Other fields" group, so a field
    added to the model later is never hidden by accident."""

    shown_otherwise: tuple[str, ...] = ()

    def get_fieldsets(self, request: HttpRequest, obj: Model | None = None) -> list[Any]:
        fieldsets = list(super().get_fieldsets(request, obj))
        if not self.fieldsets:
            return fieldsets
        mentioned = set(flatten_fieldsets(self.fieldsets)) | set(self.shown_otherwise)
        rest = [f.name for f in self.model._meta.fields if f.name not in mentioned]
        if rest:
            fieldsets.append(("Other fields", {"fields": rest, "classes": ("collapse",)}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[Any]:
        return _declared_fields(self, request, obj)


class ReadOnlyAdmin(ReadablePageMixin):
    """A list staff can read but not change (ledgers, logs, payments)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class RecordAdmin(ReadablePageMixin):
    """Records that are never edited in a form (issued invoices, orders,
    rentals, slots): the page of one shows its fields read-only with no Save
    button, and a POST to it is refused (403). Staff change them only through
    the list's actions, each of which asks for a reason, calls a service and
    is audited, and needs the change permission on the model."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Without an object this is the list's question ("may this user run the
        # actions?"); with one it is the form's, and the form is never editable.
        return obj is None and super().has_change_permission(request)


class ReportAdmin(ReadOnlyAdmin):
    """An admin page that is a report (a proxy model's changelist replaced by
    `report_view`), visible to active staff. The report only: a row's own page
    (and its history) behind the proxy stays with the model's own admin and
    its view permission."""

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return obj is None and request.user.is_active and request.user.is_staff

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return self.report_view(request)

    def report_view(self, request: HttpRequest) -> HttpResponse:  # pragma: no cover - each report defines it
        raise NotImplementedError


class ServiceAddAdmin(admin.ModelAdmin[Any]):
    """Rows added in the admin are written by a service (with its locks, checks
    and audit row). `add_through_service(request, cleaned_data)` returns the row
    it wrote; a DomainError it raises is shown on the form, which keeps what
    staff typed (the admin's add view runs in one transaction, so nothing of a
    refused attempt stays). Such rows are never changed or deleted here."""

    def add_through_service(
        self, request: HttpRequest, cleaned_data: dict[str, Any]
    ) -> Model:  # pragma: no cover - each admin defines it
        raise NotImplementedError

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # As RecordAdmin: the list's actions need the permission, a saved row's form is never editable.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_form(
        self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[Any]]:
        base: type[ModelForm[Any]] = super().get_form(request, obj, change, **kwargs)
        model_admin = self

        class ServiceForm(base):  # type: ignore[valid-type,misc]  # a class made at run time by the admin
            saved: Model

            def clean(self) -> dict[str, Any]:
                data: dict[str, Any] = super().clean()
                if not self.errors:
                    try:
                        self.saved = model_admin.add_through_service(request, data)
                    except DomainError as exc:
                        raise forms.ValidationError(exc.message, code=exc.code) from exc
                return data

        return ServiceForm

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        saved = form.saved  # written in form validation; the admin shows and logs that row
        for field in type(saved)._meta.concrete_fields:
            setattr(obj, field.attname, getattr(saved, field.attname))


class AuditedModelAdmin(admin.ModelAdmin[Any]):
    """A ModelAdmin whose every add, change and delete writes an audit row with
    the fields that changed (old and new values). Many-to-many fields (a
    template's cards) are saved after the row (save_related): what they gained
    and lost is a second row, by name; `audited_many_to_many` names them (None:
    every one on the form; a class that audits its own sets ())."""

    audited_many_to_many: tuple[str, ...] | None = None

    def _many_to_many(self, form: Any) -> list[str]:
        if self.audited_many_to_many is not None:
            return list(self.audited_many_to_many)
        return [f.name for f in type(form.instance)._meta.many_to_many if f.name in form.fields]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        obj = form.instance
        names = self._many_to_many(form)

        def values() -> dict[str, list[str]]:
            return {name: sorted(str(o) for o in getattr(obj, name).all()) for name in names}

        before = values() if change else {name: [] for name in names}
        super().save_related(request, form, formsets, change)
        diff = snapshot_diff(before, values()) if names else {}
        if diff:
            audit_record(actor=request.user, action=AuditAction.ADMIN_CHANGE, obj=obj, changes=diff)

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        before: dict[str, Any] = {}
        if change and obj.pk:
            old = type(obj)._default_manager.filter(pk=obj.pk).first()
            before = model_snapshot(old) if old else {}
        super().save_model(request, obj, form, change)
        diff = snapshot_diff(before, model_snapshot(obj))
        if diff or not change:
            audit_record(
                actor=request.user,
                action=AuditAction.ADMIN_CHANGE if change else AuditAction.ADMIN_ADD,
                obj=obj,
                changes=diff,
            )

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        audit_record(actor=request.user, action=AuditAction.ADMIN_DELETE, obj=obj, changes=model_snapshot(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            audit_record(actor=request.user, action=AuditAction.ADMIN_DELETE, obj=obj, changes=model_snapshot(obj))
        super().delete_queryset(request, queryset)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        before = {
            f.instance.pk: model_snapshot(type(f.instance).objects.get(pk=f.instance.pk))
            for f in formset.forms
            if f.instance.pk and f.has_changed()
        }
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            audit_record(actor=request.user, action=AuditAction.ADMIN_ADD, obj=obj, changes=model_snapshot(obj))
        for obj, _fields in formset.changed_objects:
            diff = snapshot_diff(before.get(obj.pk, {}), model_snapshot(obj))
            audit_record(actor=request.user, action=AuditAction.ADMIN_CHANGE, obj=obj, changes=diff)
        for obj in formset.deleted_objects:
            audit_record(actor=request.user, action=AuditAction.ADMIN_DELETE, obj=obj)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_name", "action", "content_type", "object_repr", "reason")
    fields = (
        "created_at",
        "actor",
        "actor_name",
        "action",
        "content_type",
        "object_id",
        "object_repr",
        json_display("changes", "changes"),
        "reason",
    )
    list_filter = ("action", "content_type")
    search_fields = ("actor_name", "object_repr", "object_id", "reason")
    date_hierarchy = "created_at"


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin[Lease]):
    list_display = ("name", "owner", "expires_at")
    readonly_fields = ("name", "owner", "expires_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Lease | None = None) -> bool:
        # A lease keeps one worker at a time on a chain's scan; it ends by itself when its
        # holder stops renewing it (expires_at), so nobody needs to take one away by hand.
        return False


# --- Actions that need a reason -------------------------------------------------


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        required=True,
        help_text="Recorded in the audit trail with your name and the time.",
    )


def reason_action(
    *,
    name: str,
    description: str,
    call: Callable[..., Any],
    form_class: type[forms.Form] = ReasonForm,
    single: bool = False,
    permissions: tuple[str, ...] = ("change",),
) -> Callable[[admin.ModelAdmin[Any], HttpRequest, QuerySet[Any]], TemplateResponse | None]:
    """An admin action that first asks for a reason (and whatever else
    `form_class` holds) on an intermediate page, then runs
    `call(obj, actor=request.user, **cleaned_data)` for each selected object.
    Domain refusals are shown as messages; nothing half-applies per object.
    Only staff with `permissions` on the model (change, by default) see it.
    A form class with `takes_objects = True` is built with the selection
    (`objects=queryset`), to show facts about it (`form.facts`: label, text
    pairs shown above the fields) and to check input against it."""

    @admin.action(description=description, permissions=permissions)
    def action(
        modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
    ) -> TemplateResponse | None:
        if single and queryset.count() != 1:
            modeladmin.message_user(request, "Select exactly one row for this action.", messages.WARNING)
            return None
        extra: dict[str, Any] = {"objects": queryset} if getattr(form_class, "takes_objects", False) else {}
        if request.POST.get("apply"):
            form = form_class(request.POST, **extra)
            if form.is_valid():
                done = 0
                for obj in queryset:
                    try:
                        call(obj, actor=request.user, **form.cleaned_data)
                        done += 1
                    except DomainError as exc:
                        modeladmin.message_user(request, f"{obj}: {exc.message}", messages.ERROR)
                if done:
                    modeladmin.message_user(request, f"{description}: done for {done}.", messages.SUCCESS)
                return None
        else:
            form = form_class(**extra)
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": description,
            "form": form,
            "queryset": queryset,
            "action": name,
            "opts": modeladmin.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/action_with_reason.html", context)

    action.__name__ = name
    return action


# --- Panels other apps add to a record's page -------------------------------------
# A customer's page shows their orders, invoices, rentals and credit, which live
# in apps that accounts may not import (rentals) or that may not import
# accounts (billing). Each of those apps registers a panel for the model by its
# label; the page shows the panels its viewer may see. A panel renders a bounded
# number of rows and links to the full, filtered list.

PANEL_ROWS = 10  # rows a panel shows; the rest are one link away


@dataclass(frozen=True)
class RelatedPanel:
    show: Callable[[Any], Any]  # a display function for `fieldsets` (obj -> HTML)
    permission: str  # "app_label.view_model": who may see it
    order: int


_related_panels: dict[str, list[RelatedPanel]] = {}


def related_panel_register(
    *, model: str, name: str, title: str, render: Callable[[Any], Any], permission: str, order: int = 100
) -> None:
    """Show `render(obj)` on the page of each `model` ("app_label.ModelName")
    record, labelled `title`, to staff with `permission`."""

    @admin.display(description=title)
    def show(obj: Any) -> Any:
        return render(obj)

    show.__name__ = f"panel_{name}"
    panels = [p for p in _related_panels.get(model.lower(), []) if p.show.__name__ != show.__name__]
    panels.append(RelatedPanel(show=show, permission=permission, order=order))
    _related_panels[model.lower()] = sorted(panels, key=lambda p: p.order)


def related_panels(*, model: str, user: Any) -> list[Callable[[Any], Any]]:
    """The display functions of the panels registered for `model` that `user` may see."""
    return [p.show for p in _related_panels.get(model.lower(), []) if user.has_perm(p.permission)]


def related_table(
    *,
    rows: Sequence[Any],
    columns: Sequence[tuple[str, Callable[[Any], Any]]],
    total: int,
    list_url: str,
    noun: str,
) -> SafeString:
    """Up to PANEL_ROWS `rows` as a small table (`columns`: heading, value of a
    row; values are escaped unless they are safe HTML), and a link to all
    `total` of them (`list_url`: the filtered list)."""
    if not total:
        return format_html('<span class="related-none">No {} yet.</span>', noun)
    head = format_html_join("", '<th scope="col">{}</th>', ((title,) for title, _ in columns))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((value(row),) for _, value in columns)),) for row in rows),
    )
    more = f"All {total} {noun}" if total > len(rows) else f"The {noun} as a list"
    return format_html(
        '<table class="related-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>'
        '<p class="related-more"><a href="{}">{}</a></p>',
        head,
        body,
        list_url,
        more,
    )


def admin_link(url_name: str, pk: Any, text: Any) -> SafeString:
    """A link to a record's admin page (`url_name`: "admin:app_model_change")."""
    return format_html('<a href="{}">{}</a>', reverse(url_name, args=[pk]), text)


def changelist_url(url_name: str, **filters: Any) -> str:
    """A list page filtered by `filters` (field lookups, as its filter links write them)."""
    return f"{reverse(url_name)}?{urlencode(filters)}"
