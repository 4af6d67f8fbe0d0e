//! Code generation: the original function, a hidden tool type, and one impl of the runtime's `Tool` trait.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::ast::{self, ToolFn, param_key};
use crate::attr::{self, Attrs, EffectPiece, Ghost};
use crate::ctxt::Ctxt;
use crate::valid::{self, Checked};

pub(crate) fn airlock_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut func: ToolFn = match syn::parse2(input.clone()) {
        Ok(func) => func,
        Err(err) => {
            // Not a function: say so at the item's keyword and give the tokens back unchanged.
            let span =
                syn::parse2::<syn::Item>(input.clone()).ok().and_then(|item| item_keyword(&item)).unwrap_or(err.span());
            let error =
                syn::Error::new(span, "`#[airlock_tool]` applies to a free `fn` or `async fn` item").to_compile_error();
            return quote!(#error #input);
        }
    };
    let cx = Ctxt::new();
    let attrs = attr::parse(&cx, args);
    let params = ast::params(&cx, &func);
    strip_parameter_attributes(&mut func);
    match valid::check(cx, &attrs, &func, params) {
        Ok(tool) => {
            let generated = generate(&tool);
            quote! {
                #func
                #generated
            }
        }
        Err(errors) => fallback(&func, &attrs, errors),
    }
}

/// The keyword that says what kind of item this is, e.g. `struct`.
fn item_keyword(item: &syn::Item) -> Option<Span> {
    use syn::Item;
    Some(match item {
        Item::Const(item) => item.const_token.span,
        Item::Enum(item) => item.enum_token.span,
        Item::ExternCrate(item) => item.extern_token.span,
        Item::ForeignMod(item) => item.abi.extern_token.span,
        Item::Impl(item) => item.impl_token.span,
        Item::Macro(item) => item.mac.path.span(),
        Item::Mod(item) => item.mod_token.span,
        Item::Static(item) => item.static_token.span,
        Item::Struct(item) => item.struct_token.span,
        Item::Trait(item) => item.trait_token.span,
        Item::TraitAlias(item) => item.trait_token.span,
        Item::Type(item) => item.type_token.span,
        Item::Union(item) => item.union_token.span,
        Item::Use(item) => item.use_token.span,
        _ => return None,
    })
}

/// On error: the function as written (minus our markers) plus the errors, so nothing cascades. Where the
/// tool type can exist (not on a method, and the runtime path is known), a stub of it is emitted too, so a
/// `tool!(f)` elsewhere type-checks and the user sees only the real errors.
fn fallback(func: &ToolFn, attrs: &Attrs, errors: TokenStream) -> TokenStream {
    let is_method = func.sig.inputs.iter().any(|input| matches!(input, syn::FnArg::Receiver(_)));
    if is_method || attrs.krate_invalid {
        return quote! {
            #errors
            #func
        };
    }
    let krate = runtime_path(attrs);
    let private = quote!(#krate::__private);
    let vis = &func.vis;
    let tool_ident = tool_type_ident(&func.sig.ident);
    quote! {
        #errors
        #func

        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #tool_ident {}

        impl #private::Tool for #tool_ident {
            fn spec(&self) -> &#private::ToolSpec {
                ::core::unreachable!()
            }

            fn prepare(
                &self,
                _: #private::Cow<'_, #private::Arguments>,
                _: &#private::Invocation<'_>,
            ) -> ::core::result::Result<#private::Prepared, #private::ArgumentErrors> {
                ::core::unreachable!()
            }
        }
    }
}

fn runtime_path(attrs: &Attrs) -> TokenStream {
    match &attrs.krate {
        Some(path) => quote!(#path),
        None => quote!(::agent_airlock),
    }
}

/// Doc comments on parameters and `#[inject]` are ours; rustc must not see them.
fn strip_parameter_attributes(func: &mut ToolFn) {
    for input in &mut func.sig.inputs {
        if let syn::FnArg::Typed(pat_type) = input {
            pat_type.attrs.retain(|a| !ast::is_param_attribute_we_consume(a));
        }
    }
}

/// The hidden tool type's name for a function: the function's own name. The type is a braced struct, which
/// lives in the type namespace only, beside the function in the value namespace; so whatever path or `use`
/// reaches the function reaches its tool too, and `tool!(f)` is the struct expression `f {}`.
pub(crate) fn tool_type_ident(fn_ident: &syn::Ident) -> syn::Ident {
    fn_ident.clone()
}

fn generate(tool: &Checked<'_>) -> TokenStream {
    let Checked { func, attrs, params, name, description } = tool;
    let krate = runtime_path(attrs);
    let private = quote!(#krate::__private);
    let vis = &func.vis;
    let fn_ident = &func.sig.ident;
    let tool_ident = tool_type_ident(fn_ident);

    let escalate = match &attrs.escalate {
        Some(reason) => quote!(::core::option::Option::Some(#reason)),
        None => quote!(::core::option::Option::None),
    };
    let rate = match &attrs.rate {
        Some(rate) => {
            let (count, period_secs) = (rate.count(), rate.period_secs());
            quote!(::core::option::Option::Some(#private::rate::<#count, #period_secs>()))
        }
        None => quote!(::core::option::Option::None),
    };
    let effect = match &attrs.effect {
        Some((segments, lit)) => {
            let segments = segments.iter().map(|segment| match segment {
                EffectPiece::Literal(text) => quote!(#private::effect_literal(#text)),
                EffectPiece::Param(name) => quote!(#private::effect_param(#name)),
            });
            // A named constant: the segments own their text when built at run time, so a temporary array
            // of them could not be dropped in a constant's initializer.
            quote!({
                const __AIRLOCK_EFFECT_SEGMENTS: &[#private::EffectSegment] = &[#(#segments),*];
                #private::effect_template(#lit, __AIRLOCK_EFFECT_SEGMENTS)
            })
        }
        None => quote!(),
    };
    let mask = match &attrs.mask {
        Some(set) => {
            // `MaskKind`'s variants are named as its `Debug` writes them.
            let kinds = set.kinds().map(|kind| syn::Ident::new(&format!("{kind:?}"), Span::call_site()));
            quote!(#private::mask_set(&[#(#private::MaskKind::#kinds),*]))
        }
        None => quote!(#private::DEFAULT_TOOL_MASK),
    };
    let ghost = match attrs.ghost.unwrap_or(Ghost::Strip) {
        Ghost::Strip => quote!(#private::GhostPolicy::Strip),
        Ghost::Block => quote!(#private::GhostPolicy::Block),
    };

    // Generated locals are mixed-site: neither the user's code nor a `macro_rules!` that wraps the tool can
    // see or shadow them, and they resolve even where the user's types come from another hygiene context.
    let arguments = syn::Ident::new("__airlock_arguments", Span::mixed_site());
    let invocation = syn::Ident::new("__airlock_invocation", Span::mixed_site());
    let errors = syn::Ident::new("__airlock_errors", Span::mixed_site());
    // The return-value glue is located at the return type, so a result that is not `Serialize`, an error
    // that is not `Display` and a future that is not `Send` are each reported at the user's signature.
    let output_span = match &func.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => func.sig.ident.span(),
    };
    let returned = syn::Ident::new("__airlock_returned", Span::mixed_site());

    // Everything about a model-visible parameter comes from one call, `visible_param::<T>()`, spanned at the
    // user's type. A type that cannot be an argument is reported there; the two uses (the spec and the
    // extraction) give identical diagnostics, which rustc reports once.
    let visible_param = |ty: &syn::Type| quote_spanned!(ty.span()=> #private::visible_param::<#ty>());
    let param_specs = params.iter().filter(|p| !p.injected).map(|p| {
        let key = param_key(&p.ident);
        let description = match &p.doc {
            Some(doc) => quote!(::core::option::Option::Some(#doc)),
            None => quote!(::core::option::Option::None),
        };
        let visible = visible_param(&p.ty);
        quote!(#private::param_spec(#key, #description, #visible))
    });

    let param_count = params.iter().filter(|p| !p.injected).count();
    let locals: Vec<syn::Ident> =
        (0..params.len()).map(|i| format_ident!("__airlock_arg_{}", i, span = Span::mixed_site())).collect();
    // The arguments are read in one pass over the map, each into its parameter's slot (no lookup per
    // parameter; owned arguments' values moved there); the slot of the n-th model-visible parameter is the
    // n-th of the array, taken apart by a pattern so each value moves into its parameter.
    let slot_locals: Vec<syn::Ident> =
        (0..param_count).map(|i| format_ident!("__airlock_slot_{}", i, span = Span::mixed_site())).collect();
    let mut visible_at = 0_usize;
    let extract: Vec<TokenStream> = params
        .iter()
        .zip(&locals)
        .map(|(p, local)| {
            let key = param_key(&p.ident);
            let ty = &p.ty;
            if p.injected {
                // Spanned at the type: a type that is not `Inject` is reported there.
                let inject = quote_spanned!(ty.span()=> #private::inject::<#ty>);
                quote!(let #local = #inject(#invocation, #key, &mut #errors);)
            } else {
                let visible = visible_param(ty);
                let slot = &slot_locals[visible_at];
                visible_at += 1;
                quote!(let #local = (#visible.argument)(#slot, #key, &mut #errors);)
            }
        })
        .collect();
    let call = if func.sig.asyncness.is_some() {
        quote!(#fn_ident(#(#locals),*).await)
    } else {
        quote!(#fn_ident(#(#locals),*))
    };
    // The effect key is rendered from the typed values of the parameters the template names (each
    // serialized back, spanned at its type so a type that is not `Serialize` is reported there), before the
    // values move into the call.
    let effect_const = syn::Ident::new("__AIRLOCK_EFFECT", Span::mixed_site());
    let effect_values: Vec<TokenStream> = match &attrs.effect {
        Some((pieces, _)) => {
            let mut named: Vec<&str> = Vec::new();
            for piece in pieces {
                if let EffectPiece::Param(name) = piece
                    && !named.contains(&name.as_str())
                {
                    named.push(name);
                }
            }
            named
                .into_iter()
                .filter_map(|name| {
                    let (param, local) =
                        params.iter().zip(&locals).find(|(p, _)| !p.injected && param_key(&p.ident) == name)?;
                    let ty = &param.ty;
                    let value = quote_spanned!(ty.span()=> #private::effect_value::<#ty>);
                    Some(quote!((#name, #value(&#local))))
                })
                .collect()
        }
        None => Vec::new(),
    };
    // The runtime's path keeps its own location: an unresolvable `crate = "..."` is reported once, there.
    let private_marker = syn::Ident::new("__airlock_private", Span::call_site());
    let prepared_fn = syn::Ident::new("__airlock_prepared", Span::mixed_site());
    // A signature that spells `Result<T, E>` gets its two checks at `T` and at `E` (each a function item
    // spanned there, kept where it is by the relocation below); any other return type, an alias such as
    // `io::Result<T>` included, is told apart at run time and reported at the whole return type.
    let output_marker = syn::Ident::new("__airlock_output", Span::call_site());
    let into_output = match &func.sig.output {
        syn::ReturnType::Type(_, ty) => match result_parts(ty) {
            Some((ok, err)) => {
                let (ok_marker, err_marker) = (
                    syn::Ident::new("__airlock_ok", Span::call_site()),
                    syn::Ident::new("__airlock_err", Span::call_site()),
                );
                let ok = quote_spanned!(ok.span()=> #private::ok_output::<#ok>);
                let err = quote_spanned!(err.span()=> #private::err_output::<#err>);
                located_at(
                    quote!(into_output_split(#returned, #ok_marker, #err_marker)),
                    output_span,
                    &[(ok_marker, ok), (err_marker, err)],
                )
            }
            None => located_at(quote!(into_output(#returned)), output_span, &[]),
        },
        syn::ReturnType::Default => located_at(quote!(into_output(#returned)), output_span, &[]),
    };
    let run = located_at(
        // Called through an import, so the call (where a future that is not `Send` is reported) is made
        // of relocated tokens only.
        quote! {
            {
                #[allow(unused_imports)]
                use #private_marker::{FallibleReturn as _, PlainReturn as _, prepared as #prepared_fn};
                #prepared_fn(async move {
                    let #returned = #call;
                    (&#returned).__airlock_return_kind().#output_marker
                })
            }
        },
        output_span,
        &[(private_marker, private.clone()), (output_marker, into_output)],
    );
    let prepared = if attrs.effect.is_some() {
        let values = syn::Ident::new("__airlock_effect_values", Span::mixed_site());
        quote!({
            let #values = [#(#effect_values),*];
            #private::prepared_with_effect(&#effect_const, #run, #values)
        })
    } else {
        quote!(::core::result::Result::Ok(#private::Prepared::new(#run)))
    };
    // Every argument is extracted (collecting all errors) before any is used.
    let body = if locals.is_empty() {
        prepared
    } else {
        quote! {
            let mut #errors = #private::ArgumentErrors::new();
            let mut #arguments = #arguments;
            let [#(#slot_locals),*] = #private::argument_slots(&mut #arguments, &__AIRLOCK_PARAMS);
            #(#extract)*
            match (#(#locals,)*) {
                (#(::core::option::Option::Some(#locals),)*) => #prepared,
                _ => ::core::result::Result::Err(#errors),
            }
        }
    };
    // The same call prepared from each argument's JSON text (`Tool::prepare_text`), for a tool without an
    // effect template (the dispatcher reads texts only where nothing after gate 4 reads the arguments): any
    // value that fails gives up, and the dispatcher takes `prepare`'s path, which words the errors.
    let texts = syn::Ident::new("__airlock_texts", Span::mixed_site());
    let prepare_text = if attrs.effect.is_some() {
        quote!()
    } else {
        let mut visible_at = 0_usize;
        let extract_text = params.iter().zip(&locals).map(|(p, local)| {
            let ty = &p.ty;
            if p.injected {
                let key = param_key(&p.ident);
                let inject = quote_spanned!(ty.span()=> #private::inject::<#ty>);
                quote!(let #local = #inject(#invocation, #key, &mut #errors)?;)
            } else {
                let visible = visible_param(ty);
                let at = visible_at;
                visible_at += 1;
                quote!(let #local = (#visible.text)(#texts.get(#at))?;)
            }
        });
        let errors_local = if params.iter().any(|p| p.injected) {
            quote!(let mut #errors = #private::ArgumentErrors::new();)
        } else {
            quote!()
        };
        quote! {
            fn prepares_text(&self) -> bool {
                true
            }

            #[allow(unused_variables)]
            fn prepare_text(
                &self,
                #texts: &#private::ArgumentTexts<'_>,
                #invocation: &#private::Invocation<'_>,
            ) -> ::core::option::Option<#private::Prepared> {
                #errors_local
                #(#extract_text)*
                ::core::option::Option::Some(#private::Prepared::new(#run))
            }
        }
    };
    let (effect_item, effect_option) = if attrs.effect.is_some() {
        (
            quote!(const #effect_const: #private::EffectTemplate = #effect;),
            quote!(::core::option::Option::Some(#effect_const)),
        )
    } else {
        (quote!(), quote!(::core::option::Option::None))
    };
    let tool_doc = format!("The `{name}` tool generated by `#[airlock_tool]` for `{}`.", param_key(fn_ident));

    quote! {
        #[doc = #tool_doc]
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #tool_ident {}

        const _: () = {
            #effect_item
            static __AIRLOCK_PARAMS: [#private::ParamSpec; #param_count] = [#(#param_specs),*];
            static __AIRLOCK_SPEC: #private::ToolSpec = #private::tool_spec(
                #name,
                #description,
                &__AIRLOCK_PARAMS,
                #escalate,
                #rate,
                #ghost,
                #effect_option,
                #mask,
            );

            impl #private::Tool for #tool_ident {
                fn spec(&self) -> &#private::ToolSpec {
                    &__AIRLOCK_SPEC
                }

                #[allow(unused_variables)]
                fn prepare(
                    &self,
                    #arguments: #private::Cow<'_, #private::Arguments>,
                    #invocation: &#private::Invocation<'_>,
                ) -> ::core::result::Result<#private::Prepared, #private::ArgumentErrors> {
                    #body
                }

                #prepare_text
            }
        };
    }
}

/// `tokens` with every token located at `span`, each keeping its own hygiene, so errors in the glue are
/// shown at the user's code the glue stands for; each `marker` ident is replaced by `replacement`, which
/// keeps its location.
fn located_at(tokens: TokenStream, span: Span, markers: &[(syn::Ident, TokenStream)]) -> TokenStream {
    let mut out = TokenStream::new();
    for mut token in tokens {
        match &token {
            TokenTree::Ident(ident) if let Some((_, kept)) = markers.iter().find(|(marker, _)| ident == marker) => {
                out.extend(kept.clone());
                continue;
            }
            TokenTree::Group(group) => {
                let mut moved = Group::new(group.delimiter(), located_at(group.stream(), span, markers));
                moved.set_span(group.span().located_at(span));
                token = TokenTree::Group(moved);
            }
            _ => token.set_span(token.span().located_at(span)),
        }
        out.extend([token]);
    }
    out
}

/// `T` and `E` of a return type spelled `…::Result<T, E>` (two type arguments, nothing else).
fn result_parts(ty: &syn::Type) -> Option<(&syn::Type, &syn::Type)> {
    let syn::Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match (args.args.len(), args.args.first(), args.args.last()) {
        (2, Some(syn::GenericArgument::Type(ok)), Some(syn::GenericArgument::Type(err))) => Some((ok, err)),
        _ => None,
    }
}

/// `tool!(path::to::f)` → `path::to::f {}`, a value of the generated tool type (the braced struct named like
/// the function, see [`tool_type_ident`]).
pub(crate) fn tool_path(input: TokenStream) -> TokenStream {
    let path: syn::Path = match syn::parse2(input) {
        Ok(path) => path,
        Err(err) => {
            return syn::Error::new(
                err.span(),
                "expected the path of an `#[airlock_tool]` function, e.g. `tool!(billing::refund)`",
            )
            .to_compile_error();
        }
    };
    if let Some(last) = path.segments.last()
        && !last.arguments.is_empty()
    {
        return syn::Error::new_spanned(&last.arguments, "a tool function has no generic arguments").to_compile_error();
    }
    quote!(#path {})
}
